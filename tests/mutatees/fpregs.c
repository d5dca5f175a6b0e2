/* fpregs.c: doubles and vectors kept live in xmm/ymm registers, and integers in caller-saved
 * registers, across calls to a small noinline function in a loop. gcc's interprocedural
 * register allocation (-fipa-ra, on at -O2) sees that `step` clobbers no vector register
 * and few general ones, so it keeps values there across the call instead of spilling them:
 * a snippet at `step` that calls a function (printf) and fails to save what that function
 * clobbers changes the checksums below. Printed with %a, so they are bit-exact.
 * Deterministic: always prints the same lines and exits 0. */
#include <stdio.h>

#define NOINLINE __attribute__((noinline, noclone))

typedef double v4d __attribute__((vector_size(32)));

NOINLINE int step(int i) { return (i * 7) % 13; }

/* Four scalar chains in xmm registers and two integer sums in caller-saved registers. */
NOINLINE void scalar_loop(void) {
    double a = 1.0, b = 0.5, c = 0.25, d = 3.0;
    unsigned long x = 1, y = 2;
    for (int i = 0; i < 40; i++) {
        int s = step(i);
        a = a * 1.0000001 + s;
        b = b * 0.999 + a * 1e-3;
        c = c + b / (s + 1.0);
        d = d * 1.01 - c * 1e-4;
        x = x * 6364136223846793005UL + (unsigned long)s;
        y ^= x >> 7;
    }
    printf("scalar %a %a %a %a %lx %lx\n", a, b, c, d, x, y);
}

/* The same with 256-bit vectors: with AVX, their upper halves live in ymm registers across
 * the calls; without it, gcc splits them into xmm pairs. The printed values are the same. */
#define VECTOR_LOOP(name, attr)                                                                 \
    attr NOINLINE void name(void) {                                                             \
        v4d p = {1.0, 2.0, 3.0, 4.0}, q = {0.5, 0.25, 0.125, 0.0625};                           \
        for (int i = 0; i < 40; i++) {                                                          \
            double s = step(i);                                                                 \
            p = p * 1.0001 + q * s;                                                             \
            q = q * 0.99 + p * 1e-5;                                                            \
        }                                                                                       \
        printf("vector %a %a %a %a %a %a %a %a\n", p[0], p[1], p[2], p[3], q[0], q[1], q[2],     \
               q[3]);                                                                           \
    }
VECTOR_LOOP(vector_loop_avx, __attribute__((target("avx"))))
VECTOR_LOOP(vector_loop_sse, )

int main(void) {
    scalar_loop();
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx"))
        vector_loop_avx();
    else
        vector_loop_sse();
    return 0;
}
