/* basic.c: a small C program with functions of known signatures, several kinds of types and
 * globals, a static function, a recursive function, a variadic function and a tiny function.
 * gsh's tests open it to check function discovery, signatures, variables and types.
 * Deterministic: always prints the same lines and exits 0. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* noclone too: an IPA clone (`f.constprop.0`) would hide the name tests look for. */
#define NOINLINE __attribute__((noinline, noclone))

enum color { RED, GREEN = 5, BLUE };

struct point {
    int x;
    int y;
    const char *label;
};

union number {
    int i;
    float f;
    unsigned char bytes[4];
};

struct flags {
    unsigned int ready : 1;
    unsigned int mode : 3;
    unsigned int count : 12;
    int level;
};

typedef struct point point_t;

int global_counter = 0;
long global_long = 1234567890L;
double global_double = 2.5;
char global_name[16] = "basic";
const char *global_greeting = "hello";
struct point global_point = {3, 4, "origin"};
union number global_number;
struct flags global_flags = {1, 5, 100, -2};
enum color global_color = GREEN;
static int static_hidden = 7;
int global_array[8] = {1, 2, 3, 4, 5, 6, 7, 8};

NOINLINE int inc(int x) { return x + 1; }

NOINLINE int add(int a, int b) {
    global_counter++;
    return a + b;
}

NOINLINE size_t name_length(const char *name) { return strlen(name); }

NOINLINE int sum_ints(int count, ...) {
    va_list ap;
    int total = 0;
    va_start(ap, count);
    for (int i = 0; i < count; i++)
        total += va_arg(ap, int);
    va_end(ap);
    return total;
}

NOINLINE long factorial(int n) { return n <= 1 ? 1 : n * factorial(n - 1); }

NOINLINE static int scale_hidden(int v) { return v * static_hidden; }

NOINLINE int point_distance2(point_t *p) { return p->x * p->x + p->y * p->y; }

NOINLINE float number_as_float(union number *n) { return n->f; }

NOINLINE const char *color_name(enum color c) {
    switch (c) {
    case RED:
        return "red";
    case GREEN:
        return "green";
    case BLUE:
        return "blue";
    }
    return "?";
}

NOINLINE unsigned int flags_mode(struct flags f) { return f.mode; }

NOINLINE void print_report(void) {
    printf("counter=%d color=%s mode=%u\n", global_counter, color_name(global_color),
           flags_mode(global_flags));
}

int main(void) {
    int s = add(2, 3);
    s = add(s, inc(10));
    printf("add=%d\n", s);
    printf("len=%zu\n", name_length(global_greeting));
    printf("sum=%d\n", sum_ints(4, 1, 2, 3, 4));
    printf("fact=%ld\n", factorial(10));
    printf("hidden=%d\n", scale_hidden(6));
    printf("dist2=%d\n", point_distance2(&global_point));
    global_number.f = 1.5f;
    printf("float=%.1f\n", number_as_float(&global_number));
    print_report();
    puts("done");
    return 0;
}
