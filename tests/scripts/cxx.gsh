# mutatee: cxx O0
# C++: namespaces, overloads, templates and virtual methods.
find function describe
show functions 'geo::*'
whatis geo::detail::scale
show functions 'biggest*'
