/* libtraps.c: traps.c's trap-only function in a shared library. `lib_tiny` is a lone 1-byte
 * `ret` packed between two other functions, so only an int3 reaches its entry; `lib_work`
 * calls it, and `lib_report` prints (so snippets in the library can call printf). The library
 * has a DT_INIT (gcc's _init), which the rewriter chains. */
#include <stdio.h>

#define NOINLINE __attribute__((noinline, noclone))

__asm__(".text\n"
        ".globl lib_before\n"
        ".type lib_before, @function\n"
        "lib_before:\n"
        "  leal 1(%rdi), %eax\n"
        "  ret\n"
        ".size lib_before, .-lib_before\n"
        ".globl lib_tiny\n"
        ".type lib_tiny, @function\n"
        "lib_tiny:\n"
        "  ret\n"
        ".size lib_tiny, .-lib_tiny\n"
        ".globl lib_after\n"
        ".type lib_after, @function\n"
        "lib_after:\n"
        "  leal 2(%rdi), %eax\n"
        "  ret\n"
        ".size lib_after, .-lib_after\n");

int lib_before(int);
void lib_tiny(void);
int lib_after(int);

NOINLINE int lib_work(int n) {
    int sum = 0;
    for (int i = 0; i < n; i++) {
        lib_tiny();
        sum = lib_after(lib_before(sum));
    }
    return sum;
}

NOINLINE void lib_report(int sum) { printf("lib_work gave %d\n", sum); }
