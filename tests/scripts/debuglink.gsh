# mutatee: basic debuglink
# DWARF found through .gnu_debuglink in a separate file beside the binary.
whatis add
whatis struct point
