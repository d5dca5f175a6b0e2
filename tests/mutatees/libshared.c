/* libshared.c: a small shared library, for modules other than the executable: exported
 * functions (in .dynsym, so they keep their names when stripped), a hidden one, a static one,
 * an exported global, and a constructor. gsh's tests open it directly and later load it into
 * running mutatees. */
#include <stdio.h>

#define NOINLINE __attribute__((noinline, noclone))
#define HIDDEN __attribute__((visibility("hidden")))

int shared_calls = 0;
int shared_ready = 0;

NOINLINE static int mix(int a, int b) { return a * 31 + b; }

NOINLINE HIDDEN int shared_internal(int v) { return mix(v, 7); }

NOINLINE int shared_add(int a, int b) {
    shared_calls++;
    return a + b;
}

NOINLINE int shared_hash(const char *s) {
    int h = 0;
    while (*s)
        h = mix(h, *s++);
    return shared_internal(h);
}

NOINLINE void shared_hello(void) { printf("hello from libshared (%d calls)\n", shared_calls); }

__attribute__((constructor)) static void shared_init(void) { shared_ready = 1; }
