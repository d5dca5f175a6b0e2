# A first look at /bin/ls, stripped or not, on any x86-64 Linux machine:
#   cargo run -q -p gsh -- -b scripts/explore-ls.gsh /bin/ls

echo '== the file, and what it needs at run time'
show modules
show libraries

echo '== the C library functions ls calls through its PLT'
show functions '*@plt' --sort name --limit 15

echo '== functions whose name mentions "str"'
find function 'str' --limit 10

echo '== a PLT stub: one indirect jump through the GOT'
whatis getenv@plt
disas getenv@plt

echo '== and the real getenv, in libc'
whatis libc.so.6!getenv
disas libc.so.6!getenv 8
