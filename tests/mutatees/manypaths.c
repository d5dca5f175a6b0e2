/* manypaths.c: a binary recursion 13 deep whose two calls are different call sites, so each of
 * its 16383 activations has a call path of its own: more paths than a thread's path table
 * holds (3072 of 4096 records). Deterministic: always prints the same line and exits 0. */
#include <stdio.h>

#define NOINLINE __attribute__((noinline, noclone))

static volatile long left, right;

NOINLINE void split(int depth) {
    if (depth == 0)
        return;
    left++;
    split(depth - 1);
    right++;
    split(depth - 1);
    __asm__ volatile("" ::: "memory"); /* not a tail call */
}

int main(void) {
    split(13);
    printf("left=%ld right=%ld\n", left, right);
    return 0;
}
