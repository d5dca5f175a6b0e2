# mutatee: basic O0
# DWARF types and globals: struct, union, enum, bit-fields, typedef, arrays.
whatis struct point
whatis point_t
whatis union number
whatis enum color
whatis struct flags
whatis global_counter
whatis global_array
find variable ^global_
