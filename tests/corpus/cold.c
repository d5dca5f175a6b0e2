/* Functions gcc splits into a hot part and a `.cold` part at -O2 (a path calling a `cold`
   function is moved away): gsh's tests of cold parts in stripped binaries and the ground truth
   (`cargo run -p xtask -- ground-truth`) compile it. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((cold, noinline)) void complain(const char *what, long v) {
    fprintf(stderr, "%s: %ld\n", what, v);
}

__attribute__((cold, noinline, noreturn)) void die(const char *what) {
    fprintf(stderr, "fatal: %s\n", what);
    exit(3);
}

/* The cold path rejoins the loop: the cold part jumps back into its parent. */
__attribute__((noinline)) long sum_positive(const long *a, int n) {
    long s = 0;
    for (int i = 0; i < n; i++) {
        if (a[i] < 0) {
            complain("negative", a[i]);
            s -= 2 * a[i];
            continue;
        }
        s += a[i];
    }
    return s;
}

/* The cold path never comes back. */
__attribute__((noinline)) int checked_div(int a, int b) {
    if (b == 0)
        die("division by zero");
    return a / b;
}

int main(int argc, char **argv) {
    long a[4] = {1, 2, 3, argc > 3 ? -4 : 4};
    long s = sum_positive(a, 4);
    printf("%ld %d\n", s, checked_div((int)s, argc));
    return argv[0] == 0;
}
