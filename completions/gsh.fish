# fish completion for gsh; generated from shell/src/docgen.rs; regenerate with `GSH_BLESS=1 cargo test -p gsh docgen`, do not edit.
complete -c gsh -s b -r -F -d 'Run the commands in SCRIPT, then exit'
complete -c gsh -s c -x -d 'Run COMMANDS (separated by `;` or newlines), then exit'
complete -c gsh -s p -x -a '(__fish_complete_pids)' -d 'Attach to the running process PID'
complete -c gsh -l json -d 'Print a JSON stream instead of tables: one object per line, {"command": ..., "result": ...} or {"command": ..., "error": ...}; the program\'s own output goes to stderr'
complete -c gsh -s h -l help -d 'Print help (see more with \'--help\')'
complete -c gsh -s V -l version -d 'Print version'
