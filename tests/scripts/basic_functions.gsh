# mutatee: basic O0
# Function discovery and signatures in an unstripped -O0 build.
show functions inc
show functions 'add*'
whatis add
whatis name_length
whatis sum_ints
whatis factorial
find function ^point_
