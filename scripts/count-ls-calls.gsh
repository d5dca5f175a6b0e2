# Count every function call ls makes, in a rewritten copy of /bin/ls:
#   ./gsh -b scripts/count-ls-calls.gsh /bin/ls && /tmp/ls.counted /usr
# `main` is found even though ls is stripped (gsh infers it from _start). A rewritten file can
# call only functions it has or imports: ls imports the fortified __printf_chk, not printf.

declare long gsh_calls
at '*' entry { gsh_calls++; }
at main exit { __printf_chk(1, "ls made %ld calls to its own functions\n", gsh_calls); }
show instrumentation
save /tmp/ls.counted
