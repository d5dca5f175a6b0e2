/* noreturn.c: error paths that end in exit and abort, so function discovery and CFG building
 * must know those calls never return. With no arguments it takes the normal path, prints
 * "ok" and exits 0; `noreturn exit` exits 3 through fatal(); `noreturn abort` aborts.
 * Deterministic. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* noclone too: an IPA clone (`f.constprop.0`) would hide the name tests look for. */
#define NOINLINE __attribute__((noinline, noclone))

NOINLINE __attribute__((noreturn)) void fatal(const char *why, int code) {
    fprintf(stderr, "fatal: %s\n", why);
    exit(code);
}

NOINLINE __attribute__((noreturn)) void die_hard(void) {
    fputs("abort\n", stderr);
    abort();
}

NOINLINE int checked_div(int a, int b) {
    if (b == 0)
        fatal("division by zero", 3);
    return a / b;
}

/* Falls into a noreturn call at its end; the next function follows directly in memory. */
NOINLINE int parse_mode(const char *arg) {
    if (strcmp(arg, "exit") == 0)
        return 1;
    if (strcmp(arg, "abort") == 0)
        return 2;
    die_hard();
}

NOINLINE int after_noreturn(int x) { return x * 3 + 1; }

int main(int argc, char **argv) {
    if (argc > 1) {
        int mode = parse_mode(argv[1]);
        if (mode == 1)
            checked_div(1, 0);
        die_hard();
    }
    printf("div=%d\n", checked_div(84, 2));
    printf("after=%d\n", after_noreturn(4));
    puts("ok");
    return 0;
}
