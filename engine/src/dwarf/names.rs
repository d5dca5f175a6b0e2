//! The name index: every named type and every global or static variable, by qualified
//! name, mapped to its DIE. Built once, on the first query by name, in one pass over
//! `.debug_info`; later queries are hash lookups.
//!
//! Definitions win over declarations: `struct node;` in one unit and its full definition in
//! another both land under `node`, and the definition answers.

use std::collections::HashMap;

use super::load::{Die, DieRef, Units};
use super::types::{canonical_base_name, kind_of};
use super::TypeKind;

/// One indexed type.
struct TypeEntry {
    kind: TypeKind,
    die: DieRef,
    /// A complete definition, not `struct node;`.
    complete: bool,
}

/// One indexed variable.
struct VarEntry {
    die: DieRef,
    /// Has a `DW_AT_location`: a definition, not an `extern` declaration.
    defined: bool,
    /// A `static` inside a function, indexed as `func::var`.
    local: bool,
}

/// Types and variables by name.
pub(super) struct NameIndex {
    types: HashMap<String, Vec<TypeEntry>>,
    vars: HashMap<String, Vec<VarEntry>>,
}

/// One open scope during the walk.
struct Scope {
    depth: isize,
    /// The qualified-name prefix this scope contributes (empty for none).
    prefix: String,
    /// A function body: types inside are local and not indexed, variables are static
    /// locals named `func::var`.
    function: bool,
}

impl NameIndex {
    pub fn build(units: &Units) -> NameIndex {
        let mut index = NameIndex {
            types: HashMap::new(),
            vars: HashMap::new(),
        };
        // Definitions of declared variables (`int counter = 1;` after `extern int counter;`,
        // C++ static members) carry no name; they are named after the declaration.
        let mut declared: HashMap<DieRef, String> = HashMap::new();
        let mut unnamed_defs: Vec<(DieRef, DieRef)> = Vec::new();
        for unit in 0..units.len() {
            index.walk_unit(units, unit, &mut declared, &mut unnamed_defs);
        }
        for (def, spec) in unnamed_defs {
            if let Some(name) = declared.get(&spec) {
                index.vars.entry(name.clone()).or_default().push(VarEntry {
                    die: def,
                    defined: true,
                    local: false,
                });
            }
        }
        index
    }

    fn walk_unit(
        &mut self,
        units: &Units,
        unit: usize,
        declared: &mut HashMap<DieRef, String>,
        unnamed_defs: &mut Vec<(DieRef, DieRef)>,
    ) {
        let Some(data) = units.get(unit) else { return };
        let cpp = data.cpp;
        let mut scopes: Vec<Scope> = Vec::new();
        let mut cursor = data.unit.entries();
        while let Ok(Some(die)) = cursor.next_dfs() {
            let depth = die.depth();
            while scopes.last().is_some_and(|s| s.depth >= depth) {
                scopes.pop();
            }
            let r = DieRef {
                unit,
                offset: die.offset(),
            };
            let tag = die.tag();
            let in_function = scopes.iter().any(|s| s.function);
            let prefix = scopes.last().map(|s| s.prefix.as_str()).unwrap_or("");
            let name = units.attr_str(unit, die, gimli::DW_AT_name);
            let qualified = |n: &str| {
                if prefix.is_empty() {
                    n.to_owned()
                } else {
                    format!("{prefix}::{n}")
                }
            };

            if tag == gimli::DW_TAG_variable || tag == gimli::DW_TAG_member {
                self.note_variable(
                    units,
                    r,
                    die,
                    name.as_deref().map(qualified),
                    in_function,
                    declared,
                    unnamed_defs,
                );
            } else if let (Some(kind), Some(n), false) = (kind_of(tag), &name, in_function) {
                let key = if kind == TypeKind::Base {
                    canonical_base_name(n)
                } else {
                    qualified(n)
                };
                let complete = die.attr(gimli::DW_AT_declaration).is_none();
                self.types.entry(key).or_default().push(TypeEntry {
                    kind,
                    die: r,
                    complete,
                });
            }

            if !die.has_children() {
                continue;
            }
            // Open a scope for the children. C names are never qualified, but a function
            // still names its static locals.
            let scope = match tag {
                gimli::DW_TAG_subprogram => {
                    let fname = name
                        .as_deref()
                        .map(qualified)
                        .or_else(|| origin_name(units, unit, die))
                        .unwrap_or_default();
                    Some(Scope {
                        depth,
                        prefix: fname,
                        function: true,
                    })
                }
                _ if in_function => None,
                _ if cpp => super::load::scope_name(tag, name).map(|n| Scope {
                    depth,
                    prefix: qualified(&n),
                    function: false,
                }),
                _ => None,
            };
            if let Some(scope) = scope {
                scopes.push(scope);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn note_variable(
        &mut self,
        units: &Units,
        r: DieRef,
        die: &Die,
        qualified: Option<String>,
        in_function: bool,
        declared: &mut HashMap<DieRef, String>,
        unnamed_defs: &mut Vec<(DieRef, DieRef)>,
    ) {
        let defined = die.attr(gimli::DW_AT_location).is_some();
        if die.tag() == gimli::DW_TAG_member {
            // Only DWARF 4's static data members, declared inside their class.
            if die.attr(gimli::DW_AT_declaration).is_some() {
                if let Some(q) = qualified {
                    declared.insert(r, q);
                }
            }
            return;
        }
        if in_function && !defined {
            // An automatic local (or an `extern` inside a function): not a global.
            return;
        }
        match qualified {
            Some(q) => {
                if die.attr(gimli::DW_AT_declaration).is_some() {
                    declared.insert(r, q.clone());
                }
                // Locals without a static address are frame variables, not statics.
                if in_function && static_address(units, r.unit, die).is_none() {
                    return;
                }
                self.vars.entry(q).or_default().push(VarEntry {
                    die: r,
                    defined,
                    local: in_function,
                });
            }
            None => {
                if let Some(spec) = units.attr_ref(r.unit, die, gimli::DW_AT_specification) {
                    unnamed_defs.push((r, spec));
                }
            }
        }
    }

    /// The best DIE for the variable `name` (a definition if there is one), and whether it
    /// is a static local.
    pub fn variable(&self, name: &str) -> Option<(DieRef, bool)> {
        let entries = self.vars.get(name.trim())?;
        entries
            .iter()
            .find(|e| e.defined)
            .or_else(|| entries.first())
            .map(|e| (e.die, e.local))
    }

    /// The type `name` names (`struct point`, `point`, `enum color`, `unsigned long`), and
    /// its kind. A bare name prefers a typedef or base type (what C means by it), then a
    /// struct, class, union or enum (what C++ means by it).
    pub fn type_named(&self, name: &str) -> Option<(TypeKind, DieRef)> {
        let name = name.trim();
        let (wanted, bare): (&[TypeKind], &str) = match name.split_once(char::is_whitespace) {
            Some(("struct", rest)) | Some(("class", rest)) => {
                (&[TypeKind::Struct, TypeKind::Class], rest.trim())
            }
            Some(("union", rest)) => (&[TypeKind::Union], rest.trim()),
            Some(("enum", rest)) => (&[TypeKind::Enum], rest.trim()),
            _ => (
                &[
                    TypeKind::Typedef,
                    TypeKind::Base,
                    TypeKind::Struct,
                    TypeKind::Class,
                    TypeKind::Union,
                    TypeKind::Enum,
                ],
                name,
            ),
        };
        let entries = self
            .types
            .get(bare)
            .or_else(|| self.types.get(&canonical_base_name(bare)))?;
        for kind in wanted {
            let mut of_kind = entries.iter().filter(|e| e.kind == *kind).peekable();
            let first = of_kind.peek().map(|e| e.die);
            if let Some(e) = of_kind.find(|e| e.complete) {
                return Some((e.kind, e.die));
            }
            if let Some(die) = first {
                return Some((*kind, die));
            }
        }
        None
    }

    /// Every indexed type name, sorted.
    pub fn type_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.types.keys().cloned().collect();
        names.sort();
        names
    }
}

/// The name of a function DIE that has none itself: an out-of-line or cloned instance.
fn origin_name(units: &Units, unit: usize, die: &Die) -> Option<String> {
    let origin = units.origin(unit, die)?;
    units
        .chain(origin)
        .iter()
        .find_map(|(r, _)| units.qualified_name(*r))
}

/// The link address in a variable's `DW_AT_location`, when it is a plain `DW_OP_addr` (or
/// `DW_OP_addrx`): globals and static locals. Thread-locals and register or stack
/// locations have none.
pub(super) fn static_address(units: &Units, unit: usize, die: &Die) -> Option<u64> {
    let gimli::AttributeValue::Exprloc(expr) = die.attr_value(gimli::DW_AT_location)? else {
        return None;
    };
    let u = units.unit_ref(unit)?;
    let mut ops = expr.operations(u.encoding());
    let addr = match ops.next().ok()?? {
        gimli::Operation::Address { address } => address,
        gimli::Operation::AddressIndex { index } => u.address(index).ok()?,
        _ => return None,
    };
    // `DW_OP_addr X; DW_OP_GNU_push_tls_address` and friends are not static addresses.
    match ops.next() {
        Ok(None) => Some(addr),
        _ => None,
    }
}
