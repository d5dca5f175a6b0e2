//! Lvalues: names resolved to storage, dereferences, struct fields, and the saved-register
//! slots behind `$0..$5` and `$return`.

use super::{Checker, SPECIALS};
use crate::snippet::abi;
use crate::snippet::ast::{self, BinOp, ExprKind as A, Span, UnOp};
use crate::snippet::diag::{did_you_mean, Diagnostic};
use crate::snippet::env::{Binding, PointKind, VarPlace};
use crate::snippet::ir::{Expr, Place, PlaceKind};
use crate::snippet::types::Type;

impl Checker<'_> {
    /// An lvalue that is about to be written: the place itself, not what its subscripts or
    /// pointers read.
    pub(super) fn written_place(&mut self, e: &ast::Expr) -> Option<Place> {
        self.writing = matches!(e.kind, A::Name(_));
        let place = self.place(e);
        self.writing = false;
        place
    }

    /// An lvalue.
    pub(super) fn place(&mut self, e: &ast::Expr) -> Option<Place> {
        match &e.kind {
            A::Name(name) => match self.env.lookup(name) {
                Some(Binding::Var { ty, place }) => Some(Place {
                    kind: match place {
                        VarPlace::Absolute(a) => PlaceKind::Absolute(a),
                        VarPlace::Saved(o) => PlaceKind::Saved(o),
                    },
                    ty,
                }),
                Some(Binding::Func { .. }) => {
                    self.error(e.span, format!("`{name}` is a function, not a variable"));
                    None
                }
                None => {
                    let names = self.env.names();
                    let mut d = Diagnostic::error(e.span, format!("unknown name `{name}`"));
                    if let Some(hint) = did_you_mean(name, names.iter().map(String::as_str)) {
                        d = d.with_hint(hint);
                    } else if self.writing {
                        d = d.with_hint(format!("declare it first: `declare long {name}`"));
                    } else {
                        d = d.with_hint(
                            "no parameter, local, declared variable, global or function is \
                             named so here",
                        );
                    }
                    self.diags.push(d);
                    None
                }
            },
            A::Special(name) => self.special_place(name, e.span),
            A::Unary(UnOp::Deref, p) => {
                let ptr = self.value(p)?;
                self.deref(ptr, 0, e.span)
            }
            A::Index(base, index) => {
                let ptr = self.pointer_add(base, index, BinOp::Add, e.span)?;
                self.deref(ptr, 0, e.span)
            }
            A::Member {
                base,
                field,
                field_span,
                arrow,
            } => {
                let (struct_ty, place_of) = if *arrow {
                    let p = self.value(base)?;
                    match p.ty.pointee().cloned() {
                        Some(t @ Type::Struct { .. }) => (t, Err(p)),
                        _ => {
                            self.error(
                                base.span,
                                format!("`->` needs a pointer to a struct, not `{}`", p.ty),
                            );
                            return None;
                        }
                    }
                } else {
                    let place = self.place(base)?;
                    match place.ty.clone() {
                        t @ Type::Struct { .. } => (t, Ok(place)),
                        other => {
                            let mut d = Diagnostic::error(
                                base.span,
                                format!("`.` needs a struct, not `{other}`"),
                            );
                            if other
                                .pointee()
                                .is_some_and(|t| matches!(t, Type::Struct { .. }))
                            {
                                d = d.with_hint("use `->` on a pointer");
                            }
                            self.diags.push(d);
                            return None;
                        }
                    }
                };
                let Type::Struct { name, .. } = &struct_ty else {
                    return None;
                };
                let Some(layout) = self.env.struct_layout(name) else {
                    self.diags.push(
                        Diagnostic::error(
                            base.span,
                            format!("the layout of `struct {name}` is unknown"),
                        )
                        .with_hint("struct layouts come from the mutatee's debug info"),
                    );
                    return None;
                };
                let Some(f) = layout.fields.iter().find(|f| f.name == *field) else {
                    let mut d = Diagnostic::error(
                        *field_span,
                        format!("`struct {name}` has no field `{field}`"),
                    );
                    if let Some(h) =
                        did_you_mean(field, layout.fields.iter().map(|f| f.name.as_str()))
                    {
                        d = d.with_hint(h);
                    }
                    self.diags.push(d);
                    return None;
                };
                let offset = f.offset as i64;
                let kind = match place_of {
                    Err(ptr) => PlaceKind::Deref(Box::new(ptr), offset),
                    Ok(Place {
                        kind: PlaceKind::Absolute(a),
                        ..
                    }) => PlaceKind::Absolute(a.wrapping_add(offset as u64)),
                    Ok(Place {
                        kind: PlaceKind::Saved(o),
                        ..
                    }) => PlaceKind::Saved(o + offset as u32),
                    Ok(Place {
                        kind: PlaceKind::Deref(p, o),
                        ..
                    }) => PlaceKind::Deref(p, o + offset),
                };
                Some(Place {
                    kind,
                    ty: f.ty.clone(),
                })
            }
            _ => {
                // Check it anyway, for its own diagnostics.
                if self.expr(e).is_some() {
                    self.error(
                        e.span,
                        "this is not something that can be assigned or addressed",
                    );
                }
                None
            }
        }
    }

    pub(super) fn deref(&mut self, ptr: Expr, offset: i64, span: Span) -> Option<Place> {
        match ptr.ty.pointee().cloned() {
            Some(Type::Void) => {
                self.diags.push(
                    Diagnostic::error(span, "cannot dereference a `void *`")
                        .with_hint("cast it first, e.g. `*(long *)p`"),
                );
                None
            }
            Some(ty) => Some(Place {
                kind: PlaceKind::Deref(Box::new(ptr), offset),
                ty,
            }),
            None => {
                self.error(
                    span,
                    format!("cannot dereference `{}`, which is not a pointer", ptr.ty),
                );
                None
            }
        }
    }

    /// `$0..$5` and `$return`: slots of the saved-register block.
    pub(super) fn special_place(&mut self, name: &str, span: Span) -> Option<Place> {
        let point = self.env.point().clone();
        if let Ok(n) = name.parse::<u32>() {
            if n > 5 {
                self.diags.push(
                    Diagnostic::error(span, format!("`${n}` does not exist"))
                        .with_hint("`$0`..`$5` are the six integer argument registers"),
                );
                return None;
            }
            if !matches!(
                point.kind,
                PointKind::Entry | PointKind::CallBefore | PointKind::Other
            ) {
                self.diags.push(
                    Diagnostic::error(
                        span,
                        format!("`${n}` is only available at entry points and before calls"),
                    )
                    .with_hint("the argument registers hold other values here"),
                );
                return None;
            }
            return Some(Place {
                kind: PlaceKind::Saved(abi::arg_offset(n)),
                ty: Type::LONG,
            });
        }
        if name == "return" {
            if !matches!(point.kind, PointKind::Exit | PointKind::CallAfter) {
                self.diags.push(
                    Diagnostic::error(span, "`$return` is only available at exit points")
                        .with_hint("use `at FUNC exit` or `at FUNC call ... after`"),
                );
                return None;
            }
            let ty = point.return_type.unwrap_or(Type::LONG);
            let offset = match ty {
                Type::Double => abi::xmm_offset(0),
                Type::Int(_) | Type::Ptr(_) => abi::RAX_OFFSET,
                other => {
                    self.error(
                        span,
                        format!("`$return` has type `{other}`, which snippets cannot read"),
                    );
                    return None;
                }
            };
            return Some(Place {
                kind: PlaceKind::Saved(offset),
                ty,
            });
        }
        let mut d = Diagnostic::error(span, format!("unknown special name `${name}`"));
        if let Some(h) = did_you_mean(name, SPECIALS.iter().copied()) {
            d = d.with_hint(h.replacen('`', "`$", 1));
        } else {
            d = d.with_hint(
                "specials are $0..$5 $return $function $module $file $line $callee $loop $id $tid",
            );
        }
        self.diags.push(d);
        None
    }
}
