//! Prototypes of common C library functions, for checking calls in snippets when the module
//! that defines the callee has no DWARF to say how it is declared (Debian's libc is stripped,
//! and a program's own DWARF does not describe what it imports). Without a prototype a call
//! takes any arguments, so `printf(1, 2)` would pass 1 as the format and crash the mutatee;
//! with one, the checker refuses it before anything is inserted.
//!
//! The table is C, as glibc's headers declare these functions (typedefs spelled out for
//! x86-64: `size_t` is `unsigned long`, `FILE *` and other opaque pointers are `void *`).
//! GCC's `format(printf, N, M)` attribute marks the functions whose format string
//! [`super::check`] matches against their arguments.

use std::collections::HashMap;
use std::sync::OnceLock;

use super::types::{FnSig, IntKind, Type};

/// The declarations, one per line. `__printf_chk` and friends are what `_FORTIFY_SOURCE`
/// programs (most of Debian's) import instead of `printf`.
const PROTOTYPES: &str = "
int printf(const char *format, ...) format(printf, 1, 2);
int fprintf(void *stream, const char *format, ...) format(printf, 2, 3);
int dprintf(int fd, const char *format, ...) format(printf, 2, 3);
int sprintf(char *str, const char *format, ...) format(printf, 2, 3);
int snprintf(char *str, unsigned long size, const char *format, ...) format(printf, 3, 4);
int asprintf(char **strp, const char *format, ...) format(printf, 2, 3);
int __printf_chk(int flag, const char *format, ...) format(printf, 2, 3);
int __fprintf_chk(void *stream, int flag, const char *format, ...) format(printf, 3, 4);
int __dprintf_chk(int fd, int flag, const char *format, ...) format(printf, 3, 4);
int __sprintf_chk(char *str, int flag, unsigned long len, const char *format, ...) format(printf, 4, 5);
int __snprintf_chk(char *str, unsigned long maxlen, int flag, unsigned long len, const char *format, ...) format(printf, 5, 6);
void syslog(int priority, const char *format, ...) format(printf, 2, 3);
int puts(const char *s);
int fputs(const char *s, void *stream);
int putchar(int c);
int fputc(int c, void *stream);
int putc(int c, void *stream);
int fflush(void *stream);
void *fopen(const char *path, const char *mode);
void *fdopen(int fd, const char *mode);
int fclose(void *stream);
unsigned long fwrite(const void *ptr, unsigned long size, unsigned long n, void *stream);
unsigned long fread(void *ptr, unsigned long size, unsigned long n, void *stream);
char *fgets(char *s, int size, void *stream);
int fileno(void *stream);
void perror(const char *s);
unsigned long strlen(const char *s);
unsigned long strnlen(const char *s, unsigned long maxlen);
int strcmp(const char *a, const char *b);
int strncmp(const char *a, const char *b, unsigned long n);
int strcasecmp(const char *a, const char *b);
int strncasecmp(const char *a, const char *b, unsigned long n);
char *strcpy(char *dest, const char *src);
char *strncpy(char *dest, const char *src, unsigned long n);
char *strcat(char *dest, const char *src);
char *strncat(char *dest, const char *src, unsigned long n);
char *strchr(const char *s, int c);
char *strrchr(const char *s, int c);
char *strstr(const char *haystack, const char *needle);
char *strdup(const char *s);
char *strndup(const char *s, unsigned long n);
char *strerror(int errnum);
long strtol(const char *s, char **end, int base);
unsigned long strtoul(const char *s, char **end, int base);
double strtod(const char *s, char **end);
int atoi(const char *s);
long atol(const char *s);
double atof(const char *s);
void *memcpy(void *dest, const void *src, unsigned long n);
void *memmove(void *dest, const void *src, unsigned long n);
void *memset(void *s, int c, unsigned long n);
int memcmp(const void *a, const void *b, unsigned long n);
void *memchr(const void *s, int c, unsigned long n);
void *malloc(unsigned long size);
void *calloc(unsigned long n, unsigned long size);
void *realloc(void *ptr, unsigned long size);
void free(void *ptr);
char *getenv(const char *name);
int setenv(const char *name, const char *value, int overwrite);
int system(const char *command);
void abort(void);
void exit(int status);
void _exit(int status);
long write(int fd, const void *buf, unsigned long count);
long read(int fd, void *buf, unsigned long count);
int open(const char *path, int flags, ...);
int close(int fd);
int getpid(void);
int getppid(void);
int gettid(void);
unsigned int sleep(unsigned int seconds);
int usleep(unsigned int usec);
long time(long *t);
long clock(void);
int rand(void);
void srand(unsigned int seed);
int raise(int sig);
int kill(int pid, int sig);
unsigned long pthread_self(void);
int abs(int j);
long labs(long j);
double fabs(double x);
double sqrt(double x);
double pow(double x, double y);
double exp(double x);
double log(double x);
double log2(double x);
double log10(double x);
double floor(double x);
double ceil(double x);
double round(double x);
double sin(double x);
double cos(double x);
";

/// The prototype of the C library function `name`, if the table has it.
pub fn prototype(name: &str) -> Option<&'static FnSig> {
    static TABLE: OnceLock<HashMap<&'static str, FnSig>> = OnceLock::new();
    TABLE
        .get_or_init(|| {
            PROTOTYPES
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| parse(l).unwrap_or_else(|| panic!("bad prototype: {l}")))
                .collect()
        })
        .get(name)
}

/// `int printf(const char *format, ...) format(printf, 1, 2);` → (`printf`, its signature).
fn parse(line: &'static str) -> Option<(&'static str, FnSig)> {
    let line = line.trim().strip_suffix(';')?;
    let open = line.find('(')?;
    let close = open + line[open..].find(')')?;
    let (head, params) = (&line[..open], &line[open + 1..close]);
    let name_at = head.rfind(|c: char| !(c.is_alphanumeric() || c == '_'))? + 1;
    let name = &head[name_at..];
    let ret = c_type(&head[..name_at])?;
    let mut sig = FnSig::new(ret, Vec::new(), false);
    for p in params.split(',').map(str::trim) {
        match p {
            "void" => {}
            "..." => sig.variadic = true,
            _ => {
                // Drop the parameter's name: the type is what precedes it.
                let at = p.rfind(|c: char| !(c.is_alphanumeric() || c == '_'))? + 1;
                sig.params.as_mut()?.push(c_type(&p[..at])?);
            }
        }
    }
    if let Some(attr) = line[close..].trim().strip_prefix(")") {
        let attr = attr.trim();
        if let Some(args) = attr
            .strip_prefix("format(printf,")
            .and_then(|a| a.strip_suffix(')'))
        {
            let index: usize = args.split(',').next()?.trim().parse().ok()?;
            sig.printf_format = Some(index.checked_sub(1)?);
        }
    }
    Some((name, sig))
}

/// The snippet type of a C spelling in the table.
fn c_type(c: &str) -> Option<Type> {
    let c = c.replace("const ", "");
    let c = c.trim();
    if let Some(inner) = c.strip_suffix('*') {
        return Some(Type::ptr(c_type(inner)?));
    }
    Some(match c {
        "void" => Type::Void,
        "char" => Type::Int(IntKind::Char),
        "int" => Type::INT,
        "unsigned int" => Type::Int(IntKind::UInt),
        "long" => Type::LONG,
        "unsigned long" => Type::ULONG,
        "double" => Type::Double,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_parses() {
        let lines = PROTOTYPES.lines().filter(|l| !l.trim().is_empty()).count();
        let parsed = ["printf", "memcpy", "sqrt", "abort", "__snprintf_chk"];
        for name in parsed {
            assert!(prototype(name).is_some(), "{name}");
        }
        assert!(lines > 80);
    }

    #[test]
    fn printf_is_variadic_with_its_format_first() {
        let p = prototype("printf").unwrap();
        assert_eq!(p.params, Some(vec![Type::char_ptr()]));
        assert!(p.variadic);
        assert_eq!(p.printf_format, Some(0));
        let s = prototype("__snprintf_chk").unwrap();
        assert_eq!(s.printf_format, Some(4));
        assert_eq!(s.params.as_ref().map(Vec::len), Some(5));
    }

    #[test]
    fn plain_functions_have_exact_parameters() {
        let m = prototype("memcpy").unwrap();
        assert_eq!(
            m.params,
            Some(vec![
                Type::ptr(Type::Void),
                Type::ptr(Type::Void),
                Type::ULONG
            ])
        );
        assert_eq!(m.ret, Type::ptr(Type::Void));
        assert!(!m.variadic);
        assert_eq!(prototype("abort").unwrap().params, Some(vec![]));
        assert_eq!(prototype("sqrt").unwrap().ret, Type::Double);
        assert!(prototype("no_such_function").is_none());
    }
}
