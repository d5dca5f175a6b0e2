# mutatee: basic stripped
# A stripped binary: functions come from .dynsym, PLT, .eh_frame and call targets.
show functions '*@plt'
show functions 'sub_*'
