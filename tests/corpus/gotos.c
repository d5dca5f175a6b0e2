/* Two computed-goto tables of one function, one after the other in the data, indexed by values
   no compare bounds: each table ends where the other begins. gsh's jump-table tests compile it. */
__attribute__((noinline)) long run(const int *code) {
    static void *const ops[] = { &&add, &&sub, &&twice, &&done };
    static void *const alt[] = { &&twice, &&done, &&add };
    long acc = 0;
    int pc = 0;
    goto *ops[code[pc++]];
add:
    acc += code[pc++];
    goto *ops[code[pc++]];
sub:
    acc -= code[pc++];
    goto *alt[code[pc++]];
twice:
    acc *= 2;
    goto *alt[code[pc++]];
done:
    return acc;
}

int main(int argc, char **argv) {
    /* add 5, twice, done: 10 */
    static const int prog[] = { 0, 5, 2, 1 };
    (void)argv;
    return (int)run(prog + (argc > 5)) != 10;
}
