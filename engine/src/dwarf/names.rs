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
    /// The qualified-name prefix this scope contributes (empty for none). For a function,
    /// the enclosing prefix until [`Scope::resolve`] names the function itself.
    prefix: String,
    /// A function body, and whether `prefix` has been resolved to its name yet. Types
    /// inside are local and not indexed; variables are static locals named `func::var`.
    function: Option<(DieRef, bool)>,
}

impl Scope {
    /// The function's qualified name, worked out the first time a static local needs it:
    /// most functions have none, and naming every function would double the walk's cost.
    fn resolve(&mut self, units: &Units) -> &str {
        if let Some((r, resolved @ false)) = &mut self.function {
            *resolved = true;
            let name = units.entry(*r).and_then(|die| {
                units
                    .attr_str(r.unit, &die, gimli::DW_AT_name)
                    .map(|n| join(&self.prefix, &n))
                    .or_else(|| origin_name(units, r.unit, &die))
            });
            self.prefix = name.unwrap_or_default();
        }
        &self.prefix
    }
}

/// `prefix::name`, or `name` at the top level.
fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}::{name}")
    }
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
        // Raw entries: the attributes of most DIEs (parameters, call sites, members of C
        // structs, blocks) are skipped without being decoded, which is most of libc.
        let Ok(mut raw) = data.unit.entries_raw(None) else {
            return;
        };
        let mut die = Die::null();
        while !raw.is_empty() {
            let depth = raw.next_depth();
            let offset = raw.next_offset();
            let abbrev = match raw.read_abbreviation() {
                Ok(Some(abbrev)) => abbrev,
                Ok(None) => continue,
                Err(_) => break,
            };
            while scopes.last().is_some_and(|s| s.depth >= depth) {
                scopes.pop();
            }
            let tag = abbrev.tag();
            // Nothing is pushed inside a function, so the innermost scope tells.
            let in_function = scopes.last().is_some_and(|s| s.function.is_some());
            let wanted = if in_function {
                tag == gimli::DW_TAG_variable
            } else {
                match tag {
                    gimli::DW_TAG_variable => true,
                    gimli::DW_TAG_member => cpp,
                    gimli::DW_TAG_namespace => cpp,
                    t => kind_of(t).is_some(),
                }
            };
            let read = if wanted {
                raw.read_attributes(abbrev.attributes(), &mut die.attrs)
            } else {
                die.attrs.clear();
                raw.skip_attributes(abbrev.attributes())
            };
            if read.is_err() {
                break;
            }
            die.tag = tag;
            die.has_children = abbrev.has_children();
            die.offset = offset;
            die.depth = depth;
            let die = &die;
            let r = DieRef { unit, offset };
            let name = || units.attr_str(unit, die, gimli::DW_AT_name);
            let prefix = scopes.last().map(|s| s.prefix.as_str()).unwrap_or("");

            match tag {
                gimli::DW_TAG_variable if in_function => {
                    // Only statics: automatic locals belong to `function_variables`.
                    if static_address(units, unit, die).is_none() {
                        continue;
                    }
                    let Some(n) = name() else { continue };
                    let Some(scope) = scopes.last_mut() else {
                        continue;
                    };
                    let q = join(scope.resolve(units), &n);
                    self.vars.entry(q).or_default().push(VarEntry {
                        die: r,
                        defined: true,
                        local: true,
                    });
                }
                gimli::DW_TAG_variable => match name() {
                    Some(n) => {
                        let q = join(prefix, &n);
                        if die.attr(gimli::DW_AT_declaration).is_some() {
                            declared.insert(r, q.clone());
                        }
                        let defined = die.attr(gimli::DW_AT_location).is_some();
                        self.vars.entry(q).or_default().push(VarEntry {
                            die: r,
                            defined,
                            local: false,
                        });
                    }
                    None => {
                        if let Some(spec) = units.attr_ref(unit, die, gimli::DW_AT_specification) {
                            unnamed_defs.push((r, spec));
                        }
                    }
                },
                // DWARF 4 declares C++ static data members as members of their class.
                gimli::DW_TAG_member
                    if !in_function && cpp && die.attr(gimli::DW_AT_declaration).is_some() =>
                {
                    if let Some(n) = name() {
                        declared.insert(r, join(prefix, &n));
                    }
                }
                _ if !in_function => {
                    if let (Some(kind), Some(n)) = (kind_of(tag), name()) {
                        let key = if kind == TypeKind::Base {
                            canonical_base_name(&n)
                        } else {
                            join(prefix, &n)
                        };
                        let complete = die.attr(gimli::DW_AT_declaration).is_none();
                        self.types.entry(key).or_default().push(TypeEntry {
                            kind,
                            die: r,
                            complete,
                        });
                    }
                }
                _ => {}
            }

            if !die.has_children() || in_function {
                continue;
            }
            // Open a scope for the children. C names are never qualified, but a function
            // still names its static locals.
            let prefix = scopes.last().map(|s| s.prefix.as_str()).unwrap_or("");
            let scope = match tag {
                gimli::DW_TAG_subprogram => Some(Scope {
                    depth,
                    prefix: prefix.to_owned(),
                    function: Some((r, false)),
                }),
                gimli::DW_TAG_namespace
                | gimli::DW_TAG_structure_type
                | gimli::DW_TAG_class_type
                | gimli::DW_TAG_union_type
                | gimli::DW_TAG_enumeration_type
                    if cpp =>
                {
                    super::load::scope_name(tag, name()).map(|n| Scope {
                        depth,
                        prefix: join(prefix, &n),
                        function: None,
                    })
                }
                _ => None,
            };
            if let Some(scope) = scope {
                scopes.push(scope);
            }
        }
    }

    /// The best DIE for the variable `name` (a definition if there is one), and whether it
    /// is a static local.
    pub fn variable(&self, name: &str) -> Option<(DieRef, bool)> {
        let entries = self.vars.get(name.trim().trim_start_matches("::"))?;
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
        let name = name.trim().trim_start_matches("::");
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
