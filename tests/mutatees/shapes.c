/* shapes.c: data of every shape `print` must show as gdb does: an 88-byte struct holding an
 * enum, a nested struct, an array of structs, a char array, bit-fields, a union and a
 * pointer to the next one, in a list `classify` walks, calling `weigh` for each (its locals
 * live across the call, in registers at -O2, where location lists say which). `global_sum`
 * is a global of the program that `print` must find while stopped in libc (`puts`).
 * Deterministic output. */
#include <stdio.h>
#include <string.h>

#define NOINLINE __attribute__((noinline, noclone))

enum kind { KIND_NONE, KIND_LINE = 3, KIND_POLY };

struct pt {
    int x;
    int y;
};

union val {
    long l;
    double d;
};

struct shape {
    int id;
    enum kind kind;
    struct pt origin;
    struct pt pts[4];
    char name[16];
    unsigned ready : 1;
    unsigned sides : 3;
    int level : 5;
    union val v;
    struct shape *next;
};

struct shape shapes[3];
long global_sum;
int zeros[16];
const char *greeting = "hello";

NOINLINE long weigh(const struct shape *s) {
    long area = 0;
    for (int i = 0; i < 4; i++)
        area += (long)s->pts[i].x * s->pts[i].y;
    return area;
}

NOINLINE int classify(struct shape *head) {
    int count = 0;
    long total = 0;
    for (struct shape *s = head; s; s = s->next) {
        total += weigh(s);
        count += s->kind == KIND_POLY;
    }
    global_sum += total;
    puts(head->name);
    return count * 1000 + (int)(total % 1000);
}

int main(void) {
    for (int i = 0; i < 3; i++) {
        struct shape *s = &shapes[i];
        s->id = 10 + i;
        s->kind = i == 1 ? KIND_POLY : KIND_LINE;
        s->origin.x = i;
        s->origin.y = -i;
        for (int j = 0; j < 4; j++) {
            s->pts[j].x = i + j;
            s->pts[j].y = (i + 1) * j;
        }
        snprintf(s->name, sizeof s->name, "shape%d", i);
        s->ready = 1;
        s->sides = 3 + i;
        s->level = -i;
        s->v.d = 1.5 * i;
        s->next = i < 2 ? &shapes[i + 1] : NULL;
    }
    global_sum = 100;
    int c = classify(&shapes[0]);
    printf("classify=%d sum=%ld\n", c, global_sum);
    return 0;
}
