// cxx.cpp: C++ for name demangling, overload resolution and exception unwinding: namespaces,
// classes with virtual methods, a template instantiated twice, overloaded functions, and an
// exception thrown three frames down and caught in main.
// Deterministic: always prints the same lines and exits 0.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

/* noclone too: an IPA clone (`f.constprop.0`) would hide the name tests look for. */
#define NOINLINE __attribute__((noinline, noclone))

namespace geo {

class Shape {
  public:
    explicit Shape(const char *name) : name_(name) {}
    virtual ~Shape() = default;
    virtual double area() const = 0;
    const char *name() const { return name_; }

  private:
    const char *name_;
};

class Rect : public Shape {
  public:
    Rect(double w, double h) : Shape("rect"), w_(w), h_(h) {}
    NOINLINE double area() const override { return w_ * h_; }

  private:
    double w_, h_;
};

class Square : public Rect {
  public:
    explicit Square(double s) : Rect(s, s) {}
};

namespace detail {
NOINLINE int scale(int v) { return v * 10; }
} // namespace detail

} // namespace geo

template <typename T> NOINLINE T biggest(const std::vector<T> &items) {
    T best = items.at(0);
    for (const T &item : items)
        if (item > best)
            best = item;
    return best;
}

NOINLINE int describe(int v) { return v + 1; }
NOINLINE int describe(double v) { return static_cast<int>(v * 2); }
NOINLINE int describe(const char *s) { return static_cast<int>(std::string(s).size()); }

NOINLINE int check_depth(int depth) {
    if (depth > 2)
        throw std::runtime_error("too deep");
    return depth;
}

// Recurses until check_depth throws, three frames below main's try.
NOINLINE int descend(int depth) {
    if (depth > 100)
        return 0;
    int here = check_depth(depth);
    return here + descend(depth + 1);
}

int main() {
    geo::Square sq(3.0);
    geo::Rect rect(2.0, 5.0);
    const geo::Shape *shapes[] = {&sq, &rect};
    for (const geo::Shape *s : shapes)
        std::printf("%s area=%.1f\n", s->name(), s->area());
    std::printf("scale=%d\n", geo::detail::scale(4));
    std::printf("biggest=%d %.1f\n", biggest(std::vector<int>{3, 9, 2}),
                biggest(std::vector<double>{1.5, 0.5}));
    std::printf("describe=%d %d %d\n", describe(1), describe(2.5), describe("four"));
    try {
        descend(0);
        std::puts("not reached");
    } catch (const std::runtime_error &e) {
        std::printf("caught: %s\n", e.what());
    }
    return 0;
}
