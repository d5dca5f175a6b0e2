# A first look at /bin/ls, stripped or not, on any x86-64 Linux machine:
#   ./gsh -b scripts/explore-ls.gsh /bin/ls

echo '== the file, and what it needs at run time'
show modules
show libraries

echo '== library functions ls calls through its PLT (none if built with -fno-plt)'
show functions '*@plt' --sort name --limit 12

echo '== functions whose name mentions "str"'
find function 'str' --limit 8

echo '== the entry point: crt1 _start, named even when ls is stripped'
whatis _start
disas _start

echo '== where ls gets its environment: getenv, in the C library'
whatis libc.so.6!getenv
disas libc.so.6!getenv 8
