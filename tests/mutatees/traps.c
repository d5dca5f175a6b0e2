/* traps.c: functions no jump can reach, for the trap tactic. `tiny_ret`, `tiny_a` and `tiny_b`
 * are lone 1-byte `ret`s packed between two other functions with no padding, so each entry
 * (which is also its exit) has no room for a 5-byte jump, no 2 bytes for a pun, and
 * relocating the function would need 2 bytes at its entry: only an int3 fits. With the argument `int3`, main executes a genuine
 * int3 (not an instrumentation site), which must still end the process with SIGTRAP.
 * Deterministic: always prints the same lines and exits 0. */
#include <stdio.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noclone))

/* Top-level asm keeps the three functions back to back: gcc would align each to 16 bytes. */
__asm__(".text\n"
        ".globl before_tiny\n"
        ".type before_tiny, @function\n"
        "before_tiny:\n"
        "  leal 1(%rdi), %eax\n"
        "  ret\n"
        ".size before_tiny, .-before_tiny\n"
        ".globl tiny_ret\n"
        ".type tiny_ret, @function\n"
        "tiny_ret:\n"
        "  ret\n"
        ".size tiny_ret, .-tiny_ret\n"
        ".globl tiny_a\n"
        ".type tiny_a, @function\n"
        "tiny_a:\n"
        "  ret\n"
        ".size tiny_a, .-tiny_a\n"
        ".globl tiny_b\n"
        ".type tiny_b, @function\n"
        "tiny_b:\n"
        "  ret\n"
        ".size tiny_b, .-tiny_b\n"
        ".globl after_tiny\n"
        ".type after_tiny, @function\n"
        "after_tiny:\n"
        "  leal 2(%rdi), %eax\n"
        "  ret\n"
        ".size after_tiny, .-after_tiny\n");

int before_tiny(int);
void tiny_ret(void);
void tiny_a(void);
void tiny_b(void);
int after_tiny(int);

NOINLINE int work(int n) {
    int sum = 0;
    for (int i = 0; i < n; i++) {
        tiny_ret();
        if (i % 2 == 0)
            tiny_a();
        if (i % 3 == 0)
            tiny_b();
        sum = after_tiny(before_tiny(sum));
    }
    return sum;
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "int3") == 0) {
        printf("about to trap\n");
        fflush(stdout);
        __asm__ volatile("int3");
        printf("survived the trap\n");
        return 1;
    }
    printf("work(7) = %d\n", work(7));
    printf("work(3) = %d\n", work(3));
    return 0;
}
