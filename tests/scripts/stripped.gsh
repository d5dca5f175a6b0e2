# mutatee: basic stripped
# A stripped binary: functions come from .dynsym, PLT, .eh_frame, call targets, the init and
# fini arrays (frame_dummy, __do_global_dtors_aux) and tail calls (register_tm_clones).
show functions '*@plt'
show functions 'sub_*'
