# mutatee: basic O2
# Disassembly and points of optimised code, including a tiny function.
disas inc
show points inc
disas add 4
cfg color_name
