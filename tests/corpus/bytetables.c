/* Jump tables bounded by a byte, in the shapes clang -O2 emits (sqlite3VdbeExec,
 * luaC_barrierback_), each followed in .rodata by another function's table with no symbol
 * between them: a reader that takes "a byte" for "256 entries" reads on into the next table.
 *
 * byte_guarded: the index is zero-extended first and its low byte compared after
 *   (`movzbl %r12b,%ecx; cmp $3,%cl; ja`): the compare bounds it at 4 entries.
 * byte_only: no compare at all (clang knows the value's range): `add $-5,%dl; movzbl %dl,%edx;
 *   jmp *T(,%rdx,8)`; the table has 8 entries and ends where entries lead out of the function.
 *   Two lead to the unreachable default, which clang labels after the function's last
 *   instruction, in the padding before the next function (lua's luaC_barrierback_).
 * masked: a mask bounds the index (`and $7`), not the table, which has 5 entries (lua's
 *   `disptab[op & 0x7f]` has 83).
 */
#include <stdio.h>

int byte_guarded(int);
int byte_only(const unsigned char *);
int other(int);
int masked(int);

__asm__(
    ".text\n"
    ".globl byte_guarded\n.type byte_guarded,@function\n"
    "byte_guarded:\n"
    "  add $0x96, %dil\n"
    "  movzbl %dil, %ecx\n"
    "  cmp $3, %cl\n"
    "  ja .Lg9\n"
    "  jmp *.Ltab_guarded(,%rcx,8)\n"
    ".Lg0: mov $10, %eax\n  ret\n"
    ".Lg1: mov $11, %eax\n  ret\n"
    ".Lg2: mov $12, %eax\n  ret\n"
    ".Lg3: mov $13, %eax\n  ret\n"
    ".Lg9: xor %eax, %eax\n  ret\n"
    ".size byte_guarded, .-byte_guarded\n"

    ".globl byte_only\n.type byte_only,@function\n"
    "byte_only:\n"
    "  mov 8(%rdi), %dl\n"
    "  add $0xfb, %dl\n"
    "  movzbl %dl, %edx\n"
    "  jmp *.Ltab_only(,%rdx,8)\n"
    ".Lo0: mov $20, %eax\n  ret\n"
    ".Lo1: mov $21, %eax\n  ret\n"
    ".Lo2: mov $22, %eax\n  ret\n"
    ".Lo3: mov $23, %eax\n  ret\n"
    ".Lo4: mov $24, %eax\n  ret\n"
    ".Lo5: mov $25, %eax\n  ret\n"
    ".size byte_only, .-byte_only\n"
    ".Lo_dead: .byte 0x66, 0x90\n"
    ".p2align 4\n"

    ".globl masked\n.type masked,@function\n"
    "masked:\n"
    "  mov %edi, %eax\n"
    "  and $7, %eax\n"
    "  jmp *.Ltab_masked(,%rax,8)\n"
    ".Lm0: mov $40, %eax\n  ret\n"
    ".Lm1: mov $41, %eax\n  ret\n"
    ".Lm2: mov $42, %eax\n  ret\n"
    ".size masked, .-masked\n"

    ".globl other\n.type other,@function\n"
    "other:\n"
    "  mov %edi, %eax\n"
    "  and $7, %eax\n"
    "  jmp *.Ltab_other(,%rax,8)\n"
    ".Lx0: mov $30, %eax\n  ret\n"
    ".Lx1: mov $31, %eax\n  ret\n"
    ".size other, .-other\n"

    ".section .rodata\n"
    ".p2align 3\n"
    ".Ltab_guarded: .quad .Lg0, .Lg1, .Lg2, .Lg3\n"
    ".Ltab_only: .quad .Lo0, .Lo1, .Lo_dead, .Lo2, .Lo3, .Lo_dead, .Lo4, .Lo5\n"
    ".Ltab_masked: .quad .Lm0, .Lm1, .Lm2, .Lm1, .Lm0\n"
    ".Ltab_other: .quad .Lx0, .Lx1, .Lx0, .Lx1, .Lx0, .Lx1, .Lx0, .Lx1\n"
    ".text\n");

int main(void) {
    unsigned char kinds[9] = {0};
    int sum = 0;
    for (int k = 0; k < 4; k++)
        sum += byte_guarded(k - 0x96);
    static const int live[] = {0, 1, 3, 4, 6, 7};
    for (int k = 0; k < 6; k++) {
        kinds[8] = (unsigned char)(live[k] + 5);
        sum += byte_only(kinds);
    }
    sum += other(3);
    for (int k = 0; k < 5; k++)
        sum += masked(k);
    printf("%d\n", sum);
    return 0;
}
