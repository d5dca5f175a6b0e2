# gsh's main job on /bin/ls, on any x86-64 Linux machine: explore the binary, measure a live
# run of it, then write a rewritten copy that counts its own calls, and run that.
#   ./gsh -b scripts/tour-ls.gsh /bin/ls

echo '== 1. Explore: the file and the libraries it needs'
show modules
show libraries

echo '== main, found from _start even though ls is stripped: what it calls, its loops'
whatis main
callees main
loops main

echo '== the C library function ls reads directories with'
whatis libc.so.6!readdir
disas libc.so.6!readdir 6

echo '== 2. Measure a live run of `ls -l /usr/bin`: calls into the C library, and main timed'
count libc.so.6!readdir libc.so.6!strcoll libc.so.6!malloc
time main
run -l /usr/bin > /dev/null
report
# The measures are done: the rewritten copy below counts with a snippet of its own.
delete 1 2 3 4

echo '== 3. Rewrite: a copy of ls whose every function counts its calls, reported at exit'
declare long gsh_calls
at '*' entry { gsh_calls++; }
at main exit { __printf_chk(1, "ls made %ld calls to its own functions\n", gsh_calls); }
save /tmp/ls.counted
delete 5 6

echo '== ... and run it: /tmp/ls.counted /usr'
open /tmp/ls.counted
run /usr
