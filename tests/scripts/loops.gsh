# mutatee: loops O0
# Loop trees: a nest three deep, a while loop, sibling loops, a loop calling functions.
loops nested
loops collatz_steps
loops siblings
loops calls_in_loop
callees calls_in_loop
