//! Reading the debug sections into gimli, and the small vocabulary every other part of
//! `dwarf` uses to walk DIEs: [`DieRef`] (a DIE anywhere in `.debug_info`), [`Units`] (all
//! units, each parsed on first use), attribute helpers, and C++ scopes.
//!
//! Sections are copied (and decompressed) into `Arc`-backed buffers so that the gimli
//! structures own their bytes; nothing here borrows from the mapped file.

use std::cell::OnceCell;
use std::sync::Arc;

use gimli::{AttributeValue, DwAt, DwTag, Reader as _, UnitOffset};
use object::{Object, ObjectSection};

use super::names::NameIndex;
use super::SourceLoc;

/// gimli's reader over owned, shared section bytes.
pub(super) type R = gimli::EndianArcSlice<gimli::RunTimeEndian>;

/// A DIE: which unit (an index into [`Units`]) and where in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct DieRef {
    pub unit: usize,
    pub offset: UnitOffset<usize>,
}

/// A DIE, owned.
pub(super) type Die = gimli::DebuggingInformationEntry<R>;

/// Deepest chain of references (typedef of pointer of const ...) followed before giving up:
/// well-formed DWARF never comes close, malformed DWARF may loop.
pub(super) const MAX_DEPTH: u32 = 32;

/// One parsed unit and what was learned about it.
pub(super) struct UnitData {
    pub unit: gimli::Unit<R>,
    /// C++ (or another language with namespaces and classes): names are qualified, and
    /// `struct` is not part of a type's name.
    pub cpp: bool,
    /// `(DIE offset, parent offset)` for every DIE below the root, in offset order; built on
    /// the first qualified-name question about this unit.
    parents: OnceCell<Vec<(usize, usize)>>,
}

/// All compilation units of `.debug_info`, each parsed on first use.
pub(super) struct Units {
    pub dwarf: Arc<gimli::Dwarf<R>>,
    headers: Vec<gimli::UnitHeader<R>>,
    /// Start offset of each unit in `.debug_info`, ascending, parallel to `headers`.
    starts: Vec<usize>,
    parsed: Vec<OnceCell<Option<UnitData>>>,
}

/// Everything loaded from one debug file; see [`super::DebugInfo`].
pub(super) struct State {
    pub units: Units,
    lines: OnceCell<Option<addr2line::Context<R>>>,
    names: OnceCell<NameIndex>,
    /// `.debug_loc` and `.debug_loclists`, read on the first frame-variable question (libc's
    /// are megabytes, and most sessions never ask).
    loclists: OnceCell<gimli::LocationLists<R>>,
    endian: gimli::RunTimeEndian,
}

impl State {
    /// Reads the debug sections of the ELF image `data`. `None` when it is not an object
    /// file gimli can make sense of.
    pub fn new(data: &[u8]) -> Option<State> {
        let file = object::File::parse(data).ok()?;
        let endian = if file.is_little_endian() {
            gimli::RunTimeEndian::Little
        } else {
            gimli::RunTimeEndian::Big
        };
        let empty: Arc<[u8]> = Arc::from(&[][..]);
        let load = |id: gimli::SectionId| -> Result<R, ()> {
            // Location lists, macros, type units and name tables are not used here; leaving
            // them out saves decompressing megabytes of libc's loclists.
            use gimli::SectionId::*;
            if matches!(
                id,
                DebugLoc | DebugLocLists | DebugMacinfo | DebugMacro | DebugNames | DebugTypes
            ) {
                return Ok(R::new(empty.clone(), endian));
            }
            let bytes = file
                .section_by_name(id.name())
                .and_then(|s| s.uncompressed_data().ok())
                .map(|d| Arc::from(d.as_ref()))
                .unwrap_or_else(|| empty.clone());
            Ok(R::new(bytes, endian))
        };
        let mut dwarf = gimli::Dwarf::load(load).ok()?;
        dwarf.populate_abbreviations_cache(gimli::AbbreviationsCacheStrategy::Duplicates);
        let dwarf = Arc::new(dwarf);
        let mut headers = Vec::new();
        let mut iter = dwarf.units();
        // A malformed header ends the list: units after it cannot be located reliably.
        while let Ok(Some(h)) = iter.next() {
            headers.push(h);
        }
        let starts = headers
            .iter()
            .map(|h| h.debug_info_offset().map_or(usize::MAX, |o| o.0))
            .collect();
        let parsed = headers.iter().map(|_| OnceCell::new()).collect();
        Some(State {
            units: Units {
                dwarf,
                headers,
                starts,
                parsed,
            },
            lines: OnceCell::new(),
            names: OnceCell::new(),
            loclists: OnceCell::new(),
            endian,
        })
    }

    /// The location lists of the ELF image `data` (the one [`State::new`] read).
    pub fn loclists(&self, data: &[u8]) -> &gimli::LocationLists<R> {
        self.loclists.get_or_init(|| {
            let file = object::File::parse(data).ok();
            let endian = self.endian;
            let section = |name: &str| -> R {
                let bytes: Arc<[u8]> = file
                    .as_ref()
                    .and_then(|f| f.section_by_name(name))
                    .and_then(|s| s.uncompressed_data().ok())
                    .map(|d| Arc::from(d.as_ref()))
                    .unwrap_or_else(|| Arc::from(&[][..]));
                R::new(bytes, endian)
            };
            gimli::LocationLists::new(
                gimli::DebugLoc::from(section(".debug_loc")),
                gimli::DebugLocLists::from(section(".debug_loclists")),
            )
        })
    }

    /// The name index, built on first use.
    pub fn names(&self) -> &NameIndex {
        self.names.get_or_init(|| NameIndex::build(&self.units))
    }

    fn lines(&self) -> Option<&addr2line::Context<R>> {
        self.lines
            .get_or_init(|| addr2line::Context::from_arc_dwarf(self.units.dwarf.clone()).ok())
            .as_ref()
    }

    /// The source position of `addr`, its file shortened relative to the unit's directory.
    pub fn location(&self, addr: u64) -> Option<SourceLoc> {
        let ctx = self.lines()?;
        let loc = ctx.find_location(addr).ok()??;
        let file = loc.file?;
        let line = loc.line?;
        let comp_dir = ctx
            .find_dwarf_and_unit(addr)
            .skip_all_loads()
            .and_then(|u| {
                u.comp_dir
                    .as_ref()
                    .and_then(|d| d.to_string_lossy().ok().map(|d| d.into_owned()))
            });
        Some(SourceLoc {
            file: shorten(file, comp_dir.as_deref().unwrap_or("")),
            line,
        })
    }

    /// Every line-table row from `lo` up to `hi`: each row's address and its source line, the
    /// file as the line table names it in full (for coverage: a line ran when code of any row
    /// of it ran).
    pub fn locations(&self, lo: u64, hi: u64) -> Vec<(u64, String, u32)> {
        let Some(ctx) = self.lines() else {
            return Vec::new();
        };
        let Ok(rows) = ctx.find_location_range(lo, hi) else {
            return Vec::new();
        };
        rows.filter_map(|(addr, _, loc)| Some((addr, loc.file?.to_owned(), loc.line?)))
            .filter(|&(_, _, line)| line != 0)
            .collect()
    }

    /// The DIE of the outermost function whose code contains `addr`.
    pub fn function_die(&self, addr: u64) -> Option<DieRef> {
        let ctx = self.lines()?;
        let unit = ctx.find_dwarf_and_unit(addr).skip_all_loads()?;
        let start = unit.header.debug_info_offset()?.0;
        let unit = self.units.starts.binary_search(&start).ok()?;
        let mut frames = ctx.find_frames(addr).skip_all_loads().ok()?;
        let mut outermost = None;
        while let Ok(Some(frame)) = frames.next() {
            if let Some(offset) = frame.dw_die_offset {
                outermost = Some(offset);
            }
        }
        Some(DieRef {
            unit,
            offset: outermost?,
        })
    }
}

impl Units {
    pub fn len(&self) -> usize {
        self.headers.len()
    }

    /// Unit `index`, parsed on first use; `None` when it is malformed.
    pub fn get(&self, index: usize) -> Option<&UnitData> {
        self.parsed
            .get(index)?
            .get_or_init(|| {
                let header = self.headers.get(index)?.clone();
                let unit = self.dwarf.unit(header).ok()?;
                let cpp = unit
                    .entry(unit.header.root_offset())
                    .ok()
                    .and_then(|root| root.attr_value(gimli::DW_AT_language))
                    .is_some_and(|v| match v {
                        AttributeValue::Language(lang) => is_cpp(lang),
                        _ => false,
                    });
                Some(UnitData {
                    unit,
                    cpp,
                    parents: OnceCell::new(),
                })
            })
            .as_ref()
    }

    pub fn unit_ref(&self, index: usize) -> Option<gimli::UnitRef<'_, R>> {
        Some(self.get(index)?.unit.unit_ref(&self.dwarf))
    }

    pub fn is_cpp(&self, index: usize) -> bool {
        self.get(index).is_some_and(|u| u.cpp)
    }

    /// The DIE at `r`.
    pub fn entry(&self, r: DieRef) -> Option<Die> {
        self.get(r.unit)?.unit.entry(r.offset).ok()
    }

    /// Where a reference attribute of a DIE in unit `unit` points.
    pub fn attr_ref(&self, unit: usize, die: &Die, at: DwAt) -> Option<DieRef> {
        match die.attr_value(at)? {
            AttributeValue::UnitRef(offset) => Some(DieRef { unit, offset }),
            AttributeValue::DebugInfoRef(offset) => {
                // The unit starting at or before `offset` contains it.
                let index = self
                    .starts
                    .partition_point(|&s| s <= offset.0)
                    .checked_sub(1)?;
                let offset = offset.to_unit_offset(self.headers.get(index)?)?;
                Some(DieRef {
                    unit: index,
                    offset,
                })
            }
            _ => None,
        }
    }

    /// A string attribute of a DIE in unit `unit`.
    pub fn attr_str(&self, unit: usize, die: &Die, at: DwAt) -> Option<String> {
        let value = die.attr_value(at)?;
        let s = self.unit_ref(unit)?.attr_string(value).ok()?;
        Some(s.to_string_lossy().ok()?.into_owned())
    }

    /// `DW_AT_name` of the DIE at `r`.
    pub fn name(&self, r: DieRef) -> Option<String> {
        self.attr_str(r.unit, &self.entry(r)?, gimli::DW_AT_name)
    }

    /// The DIE whose attributes `die` completes: its `DW_AT_abstract_origin` (inlined and
    /// cloned functions, their parameters) or `DW_AT_specification` (out-of-line C++ members,
    /// definitions of declared globals).
    pub fn origin(&self, unit: usize, die: &Die) -> Option<DieRef> {
        self.attr_ref(unit, die, gimli::DW_AT_abstract_origin)
            .or_else(|| self.attr_ref(unit, die, gimli::DW_AT_specification))
    }

    /// `r` followed by its origins, each with its DIE: the first one holding an attribute
    /// is where that attribute comes from.
    pub fn chain(&self, r: DieRef) -> Vec<(DieRef, Die)> {
        let mut out: Vec<(DieRef, Die)> = Vec::new();
        let mut next = Some(r);
        while let Some(r) = next {
            if out.len() as u32 >= MAX_DEPTH || out.iter().any(|(seen, _)| *seen == r) {
                break;
            }
            let Some(die) = self.entry(r) else { break };
            next = self.origin(r.unit, &die);
            out.push((r, die));
        }
        out
    }

    /// The first attribute `at` along `r`'s chain of origins, with the DIE holding it.
    pub fn chain_attr(chain: &[(DieRef, Die)], at: DwAt) -> Option<(DieRef, &Die)> {
        chain
            .iter()
            .find(|(_, d)| d.attr(at).is_some())
            .map(|(r, d)| (*r, d))
    }

    /// `DW_AT_decl_file` and `DW_AT_decl_line` of a DIE in unit `unit`.
    pub fn decl(&self, unit: usize, die: &Die) -> Option<SourceLoc> {
        let file = die.attr(gimli::DW_AT_decl_file)?.udata_value()?;
        let line = die.attr(gimli::DW_AT_decl_line)?.udata_value()?;
        Some(SourceLoc {
            file: self.file_name(unit, file)?,
            line: u32::try_from(line).ok()?,
        })
    }

    /// Entry `index` of unit `unit`'s line-program file table, shortened like line
    /// locations are.
    pub fn file_name(&self, unit: usize, index: u64) -> Option<String> {
        let u = self.unit_ref(unit)?;
        let header = u.line_program.as_ref()?.header();
        let entry = header.file(index)?;
        let text = |v| -> Option<String> {
            Some(u.attr_string(v).ok()?.to_string_lossy().ok()?.into_owned())
        };
        let name = text(entry.path_name())?;
        let comp_dir = u
            .comp_dir
            .as_ref()
            .and_then(|d| d.to_string_lossy().ok().map(|d| d.into_owned()))
            .unwrap_or_default();
        // As addr2line renders paths: the unit's directory, then the file's directory
        // (index 0 is the unit's directory itself), then the name; an absolute part restarts.
        let mut full = comp_dir.clone();
        let dir = match entry.directory_index() {
            0 => None,
            i => header.directory(i).and_then(text),
        };
        for part in dir.into_iter().chain([name]) {
            if part.starts_with('/') || full.is_empty() {
                full = part;
            } else if !part.is_empty() {
                full = format!("{}/{part}", full.trim_end_matches('/'));
            }
        }
        Some(shorten(&full, &comp_dir))
    }

    /// The parent of the DIE at `r`, for units where scopes matter (C++).
    fn parent(&self, r: DieRef) -> Option<DieRef> {
        let data = self.get(r.unit)?;
        let parents = data.parents.get_or_init(|| {
            let mut out = Vec::new();
            let mut stack: Vec<usize> = Vec::new();
            let mut cursor = data.unit.entries();
            while let Ok(Some(die)) = cursor.next_dfs() {
                let depth = usize::try_from(die.depth()).unwrap_or(0);
                stack.truncate(depth);
                if let Some(&parent) = stack.last() {
                    out.push((die.offset().0, parent));
                }
                stack.push(die.offset().0);
            }
            out
        });
        let i = parents.binary_search_by_key(&r.offset.0, |p| p.0).ok()?;
        Some(DieRef {
            unit: r.unit,
            offset: UnitOffset(parents[i].1),
        })
    }

    /// The name of the DIE at `r` qualified by its enclosing namespaces and classes
    /// (`ns::Klass::method`); just its name in C.
    pub fn qualified_name(&self, r: DieRef) -> Option<String> {
        let name = self.name(r)?;
        if !self.is_cpp(r.unit) {
            return Some(name);
        }
        let mut parts = vec![name];
        let mut at = r;
        while let Some(parent) = self.parent(at) {
            if parts.len() as u32 > MAX_DEPTH {
                break;
            }
            let Some(die) = self.entry(parent) else { break };
            let Some(scope) = scope_name(
                die.tag(),
                self.attr_str(parent.unit, &die, gimli::DW_AT_name),
            ) else {
                break;
            };
            parts.push(scope);
            at = parent;
        }
        parts.reverse();
        Some(parts.join("::"))
    }
}

/// The name a scope DIE contributes to qualified names, or `None` when `tag` is not a
/// naming scope (the unit, a function, a block).
pub(super) fn scope_name(tag: DwTag, name: Option<String>) -> Option<String> {
    match tag {
        gimli::DW_TAG_namespace => Some(name.unwrap_or_else(|| "(anonymous namespace)".into())),
        gimli::DW_TAG_structure_type
        | gimli::DW_TAG_class_type
        | gimli::DW_TAG_union_type
        | gimli::DW_TAG_enumeration_type => Some(name.unwrap_or_else(|| "{unnamed}".into())),
        _ => None,
    }
}

fn is_cpp(lang: gimli::DwLang) -> bool {
    matches!(
        lang,
        gimli::DW_LANG_C_plus_plus
            | gimli::DW_LANG_C_plus_plus_03
            | gimli::DW_LANG_C_plus_plus_11
            | gimli::DW_LANG_C_plus_plus_14
            | gimli::DW_LANG_C_plus_plus_17
            | gimli::DW_LANG_C_plus_plus_20
            | gimli::DW_LANG_ObjC_plus_plus
            | gimli::DW_LANG_D
            | gimli::DW_LANG_Rust
    )
}

/// `path` relative to `comp_dir` when it lies inside it; otherwise unchanged.
pub(super) fn shorten(path: &str, comp_dir: &str) -> String {
    let dir = comp_dir.trim_end_matches('/');
    if !dir.is_empty() {
        if let Some(rest) = path.strip_prefix(dir).and_then(|r| r.strip_prefix('/')) {
            if !rest.is_empty() {
                return rest.trim_start_matches("./").to_owned();
            }
        }
    }
    path.to_owned()
}

/// A constant attribute as an unsigned number.
pub(super) fn attr_u64(die: &Die, at: DwAt) -> Option<u64> {
    let attr = die.attr(at)?;
    attr.udata_value()
        .or_else(|| attr.sdata_value().and_then(|v| u64::try_from(v).ok()))
}
