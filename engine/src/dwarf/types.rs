//! Types: spelling a DWARF type as C would write it (`const char *`, `int (*)(int)`,
//! `unsigned long`), sizing it, and laying out named types for [`super::TypeLayout`].
//!
//! Spelling follows C's declarator rules: a type is printed around a *declarator* that grows
//! outward from the name, so `pointer to array of 3 int` becomes `int (*)[3]`.

use gimli::AttributeValue;

use super::load::{attr_u64, Die, DieRef, Units, MAX_DEPTH};
use super::{Member, TypeKind, TypeLayout};

/// The C spelling of the type `ty` refers to; `None` is `void`.
pub(super) fn spell(units: &Units, ty: Option<DieRef>) -> String {
    declare(units, ty, String::new(), 0)
}

/// The type named by `DW_AT_type` of `die` (in unit `unit`), spelled.
pub(super) fn spell_attr(units: &Units, unit: usize, die: &Die) -> String {
    spell(units, units.attr_ref(unit, die, gimli::DW_AT_type))
}

/// `ty` declared around `decl` (which is empty for an abstract type name).
fn declare(units: &Units, ty: Option<DieRef>, decl: String, depth: u32) -> String {
    let around = |base: String| {
        if decl.is_empty() {
            base
        } else {
            format!("{base} {decl}")
        }
    };
    let Some(r) = ty else {
        return around("void".into());
    };
    if depth > MAX_DEPTH {
        return around("?".into());
    }
    let Some(die) = units.entry(r) else {
        return around("?".into());
    };
    let target = units.attr_ref(r.unit, &die, gimli::DW_AT_type);
    let next = |decl: String| declare(units, target, decl, depth + 1);
    // Qualifiers bind to a pointer by following its `*`; to anything else as a prefix.
    let qualified = |word: &str| {
        let on_pointer = target.and_then(|t| units.entry(t)).is_some_and(|t| {
            matches!(
                t.tag(),
                gimli::DW_TAG_pointer_type
                    | gimli::DW_TAG_reference_type
                    | gimli::DW_TAG_rvalue_reference_type
                    | gimli::DW_TAG_ptr_to_member_type
            )
        });
        if on_pointer {
            let decl = if decl.is_empty() {
                word.to_owned()
            } else {
                format!("{word} {decl}")
            };
            next(decl)
        } else {
            format!("{word} {}", next(decl.clone()))
        }
    };
    match die.tag() {
        gimli::DW_TAG_pointer_type => next(format!("*{decl}")),
        gimli::DW_TAG_reference_type => next(format!("&{decl}")),
        gimli::DW_TAG_rvalue_reference_type => next(format!("&&{decl}")),
        gimli::DW_TAG_const_type => qualified("const"),
        gimli::DW_TAG_volatile_type => qualified("volatile"),
        gimli::DW_TAG_restrict_type => qualified(if units.is_cpp(r.unit) {
            "__restrict"
        } else {
            "restrict"
        }),
        gimli::DW_TAG_atomic_type => qualified("_Atomic"),
        gimli::DW_TAG_array_type => {
            let mut dims = String::new();
            for dim in array_dims(units, r) {
                match dim {
                    Some(n) => dims.push_str(&format!("[{n}]")),
                    None => dims.push_str("[]"),
                }
            }
            if dims.is_empty() {
                dims.push_str("[]");
            }
            next(format!("{}{dims}", parenthesize(decl)))
        }
        gimli::DW_TAG_subroutine_type => {
            let params = subroutine_params(units, r, &die, depth);
            next(format!("{}({params})", parenthesize(decl)))
        }
        gimli::DW_TAG_ptr_to_member_type => {
            let class = units
                .attr_ref(r.unit, &die, gimli::DW_AT_containing_type)
                .map(|c| declare(units, Some(c), String::new(), depth + 1))
                .unwrap_or_else(|| "?".into());
            next(format!("{class}::*{decl}"))
        }
        _ => around(named(units, r, &die)),
    }
}

/// Wraps a pointer declarator in parentheses before an array or function suffix binds to it.
fn parenthesize(decl: String) -> String {
    if decl.starts_with('*') || decl.starts_with('&') {
        format!("({decl})")
    } else {
        decl
    }
}

/// The parameter list of a function type: `int, char *`, `void`, or `int, ...`.
fn subroutine_params(units: &Units, r: DieRef, die: &Die, depth: u32) -> String {
    let mut params = Vec::new();
    for (_, child) in children(units, r) {
        match child.tag() {
            gimli::DW_TAG_formal_parameter => {
                let ty = units.attr_ref(r.unit, &child, gimli::DW_AT_type);
                params.push(declare(units, ty, String::new(), depth + 1));
            }
            gimli::DW_TAG_unspecified_parameters => params.push("...".into()),
            _ => {}
        }
    }
    let prototyped = die.attr(gimli::DW_AT_prototyped).is_some() || units.is_cpp(r.unit);
    if params.is_empty() && prototyped {
        params.push("void".into());
    }
    params.join(", ")
}

/// The name of a non-derived type: `int`, `struct point`, `ns::Klass`, `color_t`.
fn named(units: &Units, r: DieRef, die: &Die) -> String {
    let cpp = units.is_cpp(r.unit);
    let keyword = match die.tag() {
        gimli::DW_TAG_structure_type => "struct",
        gimli::DW_TAG_class_type => "class",
        gimli::DW_TAG_union_type => "union",
        gimli::DW_TAG_enumeration_type => "enum",
        gimli::DW_TAG_base_type => {
            return units
                .name(r)
                .map(|n| canonical_base_name(&n))
                .unwrap_or_else(|| "?".into())
        }
        _ => "",
    };
    let name = if cpp {
        units.qualified_name(r)
    } else {
        units.name(r)
    };
    match (name, keyword) {
        (Some(n), "") => n,
        (Some(n), _) if cpp => n,
        (Some(n), k) => format!("{k} {n}"),
        // gas gives assembly functions a nameless `DW_TAG_unspecified_type` result.
        (None, "") if die.tag() == gimli::DW_TAG_unspecified_type => "<unknown type>".into(),
        (None, "") => "?".into(),
        (None, k) => format!("{k} {{...}}"),
    }
}

/// gcc's base type names (`long unsigned int`) as C programmers write them
/// (`unsigned long`); other names unchanged.
pub(super) fn canonical_base_name(name: &str) -> String {
    let words: Vec<&str> = name.split_whitespace().collect();
    let integer_word = |w: &&str| {
        matches!(
            *w,
            "unsigned" | "signed" | "long" | "short" | "int" | "char"
        )
    };
    if words.is_empty() || !words.iter().all(integer_word) {
        return words.join(" ");
    }
    let count = |w: &str| words.iter().filter(|x| **x == w).count();
    let sign = if count("unsigned") > 0 {
        "unsigned "
    } else {
        ""
    };
    if count("char") > 0 {
        let sign = if count("signed") > 0 { "signed " } else { sign };
        return format!("{sign}char");
    }
    let size = match (count("short"), count("long")) {
        (s, _) if s > 0 => "short",
        (_, 0) => "",
        (_, 1) => "long",
        _ => "long long",
    };
    match (sign, size) {
        (s, "") => format!("{s}int"),
        (s, z) => format!("{s}{z}"),
    }
}

/// The element counts of an array type's dimensions (`None` for an unknown bound).
fn array_dims(units: &Units, r: DieRef) -> Vec<Option<u64>> {
    children(units, r)
        .into_iter()
        .filter(|(_, d)| d.tag() == gimli::DW_TAG_subrange_type)
        .map(|(_, d)| {
            attr_u64(&d, gimli::DW_AT_count).or_else(|| {
                let upper = d.attr(gimli::DW_AT_upper_bound)?;
                // A bound of -1 (or a non-constant one) marks a flexible or VLA dimension.
                let upper = upper
                    .udata_value()
                    .filter(|&u| u != u64::MAX && u < 1 << 48)?;
                let lower = attr_u64(&d, gimli::DW_AT_lower_bound).unwrap_or(0);
                (upper + 1).checked_sub(lower)
            })
        })
        .collect()
}

/// The direct children of the DIE at `r`, in order.
pub(super) fn children(units: &Units, r: DieRef) -> Vec<(DieRef, Die)> {
    let mut out = Vec::new();
    let Some(data) = units.get(r.unit) else {
        return out;
    };
    let Ok(mut tree) = data.unit.entries_tree(Some(r.offset)) else {
        return out;
    };
    let Ok(root) = tree.root() else { return out };
    let mut kids = root.children();
    while let Ok(Some(child)) = kids.next() {
        let die = child.entry().clone();
        out.push((
            DieRef {
                unit: r.unit,
                offset: die.offset(),
            },
            die,
        ));
    }
    out
}

/// The size in bytes of the type `ty` refers to, when DWARF says or implies it.
pub(super) fn size_of(units: &Units, ty: Option<DieRef>) -> Option<u64> {
    size_at(units, ty, 0)
}

fn size_at(units: &Units, ty: Option<DieRef>, depth: u32) -> Option<u64> {
    let mut r = ty?;
    for _ in depth..MAX_DEPTH {
        let die = units.entry(r)?;
        if let Some(size) = attr_u64(&die, gimli::DW_AT_byte_size) {
            return Some(size);
        }
        match die.tag() {
            gimli::DW_TAG_pointer_type
            | gimli::DW_TAG_reference_type
            | gimli::DW_TAG_rvalue_reference_type => {
                return Some(u64::from(units.get(r.unit)?.unit.header.address_size()))
            }
            gimli::DW_TAG_array_type => {
                let elem = units.attr_ref(r.unit, &die, gimli::DW_AT_type);
                let elem = size_at(units, elem, depth + 1)?;
                return array_dims(units, r)
                    .into_iter()
                    .try_fold(elem, |acc, n| acc.checked_mul(n?));
            }
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type => r = units.attr_ref(r.unit, &die, gimli::DW_AT_type)?,
            _ => return None,
        }
    }
    None
}

/// The kind of type a DIE tag declares, for the tags [`super::DebugInfo::type_layout`] knows.
pub(super) fn kind_of(tag: gimli::DwTag) -> Option<TypeKind> {
    Some(match tag {
        gimli::DW_TAG_structure_type => TypeKind::Struct,
        gimli::DW_TAG_class_type => TypeKind::Class,
        gimli::DW_TAG_union_type => TypeKind::Union,
        gimli::DW_TAG_enumeration_type => TypeKind::Enum,
        gimli::DW_TAG_typedef => TypeKind::Typedef,
        gimli::DW_TAG_base_type => TypeKind::Base,
        _ => return None,
    })
}

/// The layout of the type at `r` (entry `die`) before its members, enumerators or target.
fn bare_layout(units: &Units, r: DieRef, die: &Die, kind: TypeKind) -> TypeLayout {
    TypeLayout {
        kind,
        name: spell(units, Some(r)),
        size: size_of(units, Some(r)),
        members: Vec::new(),
        enumerators: Vec::new(),
        target: None,
        decl: units.decl(r.unit, die),
    }
}

/// The layout of the named type at `r`, which the name index found as a `kind`.
pub(super) fn layout(units: &Units, r: DieRef, kind: TypeKind) -> Option<TypeLayout> {
    let die = units.entry(r)?;
    let mut out = bare_layout(units, r, &die, kind);
    // A typedef shows what it names, and the members of the aggregate beneath any further
    // typedefs and qualifiers.
    let mut body = r;
    if kind == TypeKind::Typedef {
        let target = units.attr_ref(r.unit, &die, gimli::DW_AT_type);
        out.target = Some(spell(units, target));
        body = strip_aliases(units, target)?;
    }
    let body_die = units.entry(body)?;
    match body_die.tag() {
        gimli::DW_TAG_structure_type | gimli::DW_TAG_class_type | gimli::DW_TAG_union_type => {
            out.members = members(units, body);
        }
        gimli::DW_TAG_enumeration_type => out.enumerators = enumerators(units, body),
        _ => {}
    }
    Some(out)
}

/// `ty` with typedefs and qualifiers peeled off; `None` for `void`.
fn strip_aliases(units: &Units, ty: Option<DieRef>) -> Option<DieRef> {
    let mut r = ty?;
    for _ in 0..MAX_DEPTH {
        let die = units.entry(r)?;
        match die.tag() {
            gimli::DW_TAG_typedef
            | gimli::DW_TAG_const_type
            | gimli::DW_TAG_volatile_type
            | gimli::DW_TAG_restrict_type
            | gimli::DW_TAG_atomic_type => r = units.attr_ref(r.unit, &die, gimli::DW_AT_type)?,
            _ => return Some(r),
        }
    }
    None
}

/// The layout of `ty` when it is a struct, union or class without a name.
fn anonymous_layout(units: &Units, ty: Option<DieRef>, depth: u32) -> Option<Box<TypeLayout>> {
    let r = strip_aliases(units, ty)?;
    let die = units.entry(r)?;
    let kind = match die.tag() {
        gimli::DW_TAG_structure_type => TypeKind::Struct,
        gimli::DW_TAG_union_type => TypeKind::Union,
        gimli::DW_TAG_class_type => TypeKind::Class,
        _ => return None,
    };
    if die.attr(gimli::DW_AT_name).is_some() || depth >= MAX_DEPTH {
        return None;
    }
    let mut layout = bare_layout(units, r, &die, kind);
    layout.members = members_at(units, r, depth + 1);
    Some(Box::new(layout))
}

/// The data members (and base classes) of a struct, class or union.
fn members(units: &Units, r: DieRef) -> Vec<Member> {
    members_at(units, r, 0)
}

fn members_at(units: &Units, r: DieRef, depth: u32) -> Vec<Member> {
    let mut out = Vec::new();
    for (_, child) in children(units, r) {
        let tag = child.tag();
        if tag != gimli::DW_TAG_member && tag != gimli::DW_TAG_inheritance {
            continue;
        }
        // DWARF 4 describes C++ static data members as declared members; they take no room.
        if child.attr(gimli::DW_AT_declaration).is_some()
            || (tag == gimli::DW_TAG_member && child.attr(gimli::DW_AT_external).is_some())
        {
            continue;
        }
        let ty = units.attr_ref(r.unit, &child, gimli::DW_AT_type);
        let size = size_of(units, ty);
        let byte_offset = member_offset(&child).unwrap_or(0);
        let bits = child
            .attr(gimli::DW_AT_bit_size)
            .and_then(|a| a.udata_value())
            .map(|bit_size| {
                let bit_offset = if let Some(b) = attr_u64(&child, gimli::DW_AT_data_bit_offset) {
                    b
                } else if let Some(b) = attr_u64(&child, gimli::DW_AT_bit_offset) {
                    // DWARF 2/3 count from the most significant bit of the storage unit; on a
                    // little-endian machine that is the far end of the unit.
                    let storage = attr_u64(&child, gimli::DW_AT_byte_size)
                        .or(size)
                        .unwrap_or(0)
                        .saturating_mul(8);
                    byte_offset
                        .saturating_mul(8)
                        .saturating_add(storage.saturating_sub(b.saturating_add(bit_size)))
                } else {
                    byte_offset.saturating_mul(8)
                };
                (bit_offset, bit_size)
            });
        let offset = match bits {
            Some((bit_offset, _)) if child.attr(gimli::DW_AT_data_bit_offset).is_some() => {
                bit_offset / 8
            }
            _ => byte_offset,
        };
        out.push(Member {
            name: units.attr_str(r.unit, &child, gimli::DW_AT_name),
            type_name: spell(units, ty),
            offset,
            size,
            bits,
            inline: anonymous_layout(units, ty, depth),
        });
    }
    out
}

/// `DW_AT_data_member_location` as a constant, or as the `DW_OP_plus_uconst N` expression
/// DWARF 2 producers write.
fn member_offset(die: &Die) -> Option<u64> {
    let attr = die.attr(gimli::DW_AT_data_member_location)?;
    if let Some(v) = attr.udata_value() {
        return Some(v);
    }
    let AttributeValue::Exprloc(expr) = attr.value() else {
        return None;
    };
    let encoding = gimli::Encoding {
        format: gimli::Format::Dwarf32,
        version: 4,
        address_size: 8,
    };
    let mut ops = expr.operations(encoding);
    match ops.next().ok()? {
        Some(gimli::Operation::PlusConstant { value }) => Some(value),
        _ => None,
    }
}

/// The enumerators of an enum, with their values.
fn enumerators(units: &Units, r: DieRef) -> Vec<(String, i64)> {
    children(units, r)
        .into_iter()
        .filter(|(_, d)| d.tag() == gimli::DW_TAG_enumerator)
        .filter_map(|(_, d)| {
            let name = units.attr_str(r.unit, &d, gimli::DW_AT_name)?;
            let value = d.attr(gimli::DW_AT_const_value)?;
            let value = match value.value() {
                AttributeValue::Sdata(v) => v,
                AttributeValue::Udata(v) => v as i64,
                // Fixed-size data forms carry no sign; gcc uses them for enums whose
                // underlying type is unsigned, so read them as unsigned.
                _ => value.udata_value()? as i64,
            };
            Some((name, value))
        })
        .collect()
}
