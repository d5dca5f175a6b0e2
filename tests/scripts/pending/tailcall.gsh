# mutatee: tailcall O2
# Tail calls leave the function: they are exit points and call sites at once.
show points forward
show points choose
disas is_even
