# mutatee: basic O0
# declare, at (entry, exit with a condition, call sites, a glob), show instrumentation, delete.
declare long calls
declare double ratio = 1.0 / 4
at add entry { calls++; }
at main exit { printf("add ran %ld times\n", calls); }
at add exit if ($return > 3) { calls += $return; }
at main call add before { ratio = ratio * 2 + $0; }
at 'point_*' entry { printf("-> %s\n", $function); }
show instrumentation
delete 2 4
show instrumentation
