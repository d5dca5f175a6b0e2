/* tailcall.c: functions that end in tail calls (a jmp to another function at -O2), a
 * mutually recursive pair, and a tail call through a function pointer. Exit points and
 * call-site points must treat each tail jump as leaving the function.
 * Deterministic: always prints the same lines and exits 0. */
#include <stdio.h>

/* noclone too: an IPA clone (`f.constprop.0`) would hide the name tests look for. */
#define NOINLINE __attribute__((noinline, noclone))

volatile int side;

NOINLINE int leaf(int x) {
    side = x;
    return x * 2;
}

NOINLINE int forward(int x) { return leaf(x + 1); }

NOINLINE int choose(int x) {
    if (x > 10)
        return leaf(x);
    return forward(x);
}

NOINLINE int is_odd(unsigned int n);

NOINLINE int is_even(unsigned int n) { return n == 0 ? 1 : is_odd(n - 1); }

NOINLINE int is_odd(unsigned int n) { return n == 0 ? 0 : is_even(n - 1); }

NOINLINE int apply(int (*fn)(int), int x) { return fn(x); }

int main(void) {
    printf("forward=%d\n", forward(4));
    printf("choose=%d,%d\n", choose(20), choose(2));
    printf("even=%d\n", is_even(10));
    printf("apply=%d\n", apply(leaf, 7));
    return 0;
}
