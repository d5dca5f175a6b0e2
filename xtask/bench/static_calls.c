/* bench-static's mutatee: a tight loop calling one tiny function, timed around the loop.
 * `f4` compiles to `lea eax,[rdi+1]; ret` (4 bytes) and `f10` to `imul; add; ret`
 * (10 bytes) at gcc -O2; both noinline, and the volatile sink keeps the calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__attribute__((noinline)) int f4(int x) { return x + 1; }
__attribute__((noinline)) int f10(int x) { return x * 1000003 + 5; }

volatile int sink;

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s f4|f10 CALLS\n", argv[0]);
    return 2;
  }
  long n = atol(argv[2]);
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  if (strcmp(argv[1], "f4") == 0)
    for (long i = 0; i < n; i++) sink = f4((int)i);
  else
    for (long i = 0; i < n; i++) sink = f10((int)i);
  clock_gettime(CLOCK_MONOTONIC, &b);
  /* The loop's wall time in ns; instrumented builds print their counter after it. */
  printf("%ld\n", (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec));
  return 0;
}
