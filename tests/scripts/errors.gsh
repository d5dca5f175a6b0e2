# mutatee: basic O0
# exit: 1
# A batch stops at its first failing command; what ran before it still printed.
echo before
whatis no_such_function
echo not reached
