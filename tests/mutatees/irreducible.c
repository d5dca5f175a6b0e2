/* irreducible.c: a cycle with two entries, written with gotos, so no block of it dominates
 * the others and it is not a natural loop (loop analysis must report it, not crash or
 * invent a loop); beside it, a reducible loop in the same function, so the loop tree is not
 * empty. Deterministic: always prints the same line and exits 0. */
#include <stdio.h>

/* noclone too: an IPA clone (`f.constprop.0`) would hide the name tests look for. */
#define NOINLINE __attribute__((noinline, noclone))

volatile int sink;

NOINLINE int tangled(int n, int start_late) {
    int acc = 1, i = 0;
    if (start_late)
        goto late;
early:
    acc = acc * 3 + i;
    sink = acc;
late:
    acc ^= i << 2;
    i++;
    if (i < n) {
        if (acc & 1)
            goto early;
        goto late;
    }
    for (int k = 0; k < n; k++)
        acc += k * sink;
    return acc;
}

int main(void) {
    printf("tangled=%d,%d\n", tangled(9, 0), tangled(9, 1));
    return 0;
}
