# bash completion for gsh; generated from shell/src/docgen.rs; regenerate with `GSH_BLESS=1 cargo test -p gsh docgen`, do not edit.
_gsh() {
    local cur prev
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    case "$prev" in
        -b) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        -c) return ;;
        -p) COMPREPLY=($(compgen -W "$(ps -e -o pid= 2>/dev/null)" -- "$cur")); return ;;
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "-b -c -p --json -h --help -V --version" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}
complete -o filenames -o bashdefault -F _gsh gsh
