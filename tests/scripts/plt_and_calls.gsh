# mutatee: noreturn O2
# PLT stubs, call graph edges and noreturn error paths.
show functions '*@plt'
callers fatal
callees main
cfg checked_div
