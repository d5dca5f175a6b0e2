//! Functions and variables: a subprogram DIE's signature ([`FunctionInfo`]), its parameters
//! and locals, and a global's [`VariableInfo`].
//!
//! Optimized and C++ code splits one function across several DIEs: the concrete instance
//! (with addresses) points at an abstract one (`DW_AT_abstract_origin`, for inlined and
//! cloned code), and an out-of-line member definition at its declaration in the class
//! (`DW_AT_specification`). Each attribute is taken from the first DIE of that chain that has it.

use super::load::{Die, DieRef, Units, MAX_DEPTH};
use super::names::static_address;
use super::types::{children, size_of, spell, spell_attr};
use super::{FunctionInfo, LinkAddr, Param, VariableInfo, VariableKind};

/// What DWARF says about the function whose DIE is `r`.
pub(super) fn function_info(units: &Units, r: DieRef) -> Option<FunctionInfo> {
    let chain = units.chain(r);
    let (named, _) = Units::chain_attr(&chain, gimli::DW_AT_name)?;
    let name = units.qualified_name(named)?;
    let return_type = match Units::chain_attr(&chain, gimli::DW_AT_type) {
        Some((at, die)) => spell_attr(units, at.unit, die),
        None => "void".into(),
    };
    let decl = Units::chain_attr(&chain, gimli::DW_AT_decl_line)
        .and_then(|(at, die)| units.decl(at.unit, die));

    let source = param_source(units, &chain);
    let mut params = Vec::new();
    let mut variadic = false;
    for (child_ref, child) in children(units, source) {
        match child.tag() {
            gimli::DW_TAG_formal_parameter => {
                let chain = units.chain(child_ref);
                // `this` is implied by the qualified name, as C++ writes signatures.
                if Units::chain_attr(&chain, gimli::DW_AT_artificial).is_some() {
                    continue;
                }
                params.push(Param {
                    name: Units::chain_attr(&chain, gimli::DW_AT_name)
                        .and_then(|(at, die)| units.attr_str(at.unit, die, gimli::DW_AT_name)),
                    type_name: chain_type(units, &chain),
                });
            }
            gimli::DW_TAG_unspecified_parameters => variadic = true,
            _ => {}
        }
    }
    // C++ has no unprototyped functions; C says so with `DW_AT_prototyped`; assembly
    // units say nothing.
    let prototyped = units.is_cpp(r.unit)
        || Units::chain_attr(&chain, gimli::DW_AT_prototyped).is_some()
        || !params.is_empty()
        || variadic;
    Some(FunctionInfo {
        name,
        return_type,
        params,
        variadic,
        prototyped,
        decl,
    })
}

/// The DIE whose children list the function's parameters as written in the source. A
/// concrete clone may have lost some (constant-propagated away), so the abstract origin, when
/// there is one with parameters, is the source-level truth.
fn param_source(units: &Units, chain: &[(DieRef, Die)]) -> DieRef {
    let has_params = |r: DieRef| {
        children(units, r).iter().any(|(_, d)| {
            matches!(
                d.tag(),
                gimli::DW_TAG_formal_parameter | gimli::DW_TAG_unspecified_parameters
            )
        })
    };
    let concrete = chain[0].0;
    if let Some((origin, _)) = chain.iter().skip(1).find(|(_, d)| {
        d.attr(gimli::DW_AT_declaration).is_none() && d.tag() == gimli::DW_TAG_subprogram
    }) {
        if units
            .attr_ref(concrete.unit, &chain[0].1, gimli::DW_AT_abstract_origin)
            .is_some()
            && has_params(*origin)
        {
            return *origin;
        }
    }
    if has_params(concrete) {
        return concrete;
    }
    // A definition may list nothing when its declaration does (rare; seen in old C++).
    chain
        .iter()
        .map(|(r, _)| *r)
        .find(|r| has_params(*r))
        .unwrap_or(concrete)
}

/// The spelled type along a chain of origins.
fn chain_type(units: &Units, chain: &[(DieRef, Die)]) -> String {
    match Units::chain_attr(chain, gimli::DW_AT_type) {
        Some((at, die)) => spell_attr(units, at.unit, die),
        None => "void".into(),
    }
}

/// The parameters and locals of the function whose DIE is `r`: parameters first, then
/// variables of the body and its nested blocks in source order. Functions inlined into it
/// keep their own variables.
pub(super) fn function_variables(units: &Units, r: DieRef) -> Vec<VariableInfo> {
    variables_at(units, r, 0)
}

fn variables_at(units: &Units, r: DieRef, depth: u32) -> Vec<VariableInfo> {
    let mut params = Vec::new();
    let mut locals = Vec::new();
    let mut stack = vec![r];
    let mut visited = 0usize;
    while let Some(scope) = stack.pop() {
        // Scopes are pushed in reverse so that they are visited in source order.
        let mut nested = Vec::new();
        for (child_ref, child) in children(units, scope) {
            visited += 1;
            if visited > 100_000 {
                break;
            }
            match child.tag() {
                gimli::DW_TAG_formal_parameter if scope == r => {
                    params.extend(local_info(units, child_ref, VariableKind::Param));
                }
                gimli::DW_TAG_variable => {
                    let kind = if static_address(units, child_ref.unit, &child).is_some() {
                        VariableKind::StaticLocal
                    } else {
                        VariableKind::Local
                    };
                    locals.extend(local_info(units, child_ref, kind));
                }
                gimli::DW_TAG_lexical_block => nested.push(child_ref),
                _ => {}
            }
        }
        stack.extend(nested.into_iter().rev());
    }
    // A concrete instance with no variables of its own still has its source's.
    if params.is_empty() && locals.is_empty() {
        if let Some(entry) = units.entry(r) {
            if let Some(origin) = units.attr_ref(r.unit, &entry, gimli::DW_AT_abstract_origin) {
                if origin != r && depth < MAX_DEPTH {
                    return variables_at(units, origin, depth + 1);
                }
            }
        }
    }
    params.extend(locals);
    params
}

/// A parameter or local variable, its name and type completed from its origins.
pub(super) fn local_info(units: &Units, r: DieRef, kind: VariableKind) -> Option<VariableInfo> {
    let chain = units.chain(r);
    let (named, die) = Units::chain_attr(&chain, gimli::DW_AT_name)?;
    let name = units.attr_str(named.unit, die, gimli::DW_AT_name)?;
    let ty = Units::chain_attr(&chain, gimli::DW_AT_type)
        .and_then(|(at, die)| units.attr_ref(at.unit, die, gimli::DW_AT_type));
    let addr = chain
        .iter()
        .find_map(|(at, die)| static_address(units, at.unit, die))
        .map(LinkAddr);
    Some(VariableInfo {
        name,
        type_name: spell(units, ty),
        addr,
        size: size_of(units, ty),
        decl: Units::chain_attr(&chain, gimli::DW_AT_decl_line)
            .and_then(|(at, die)| units.decl(at.unit, die)),
        kind,
    })
}

/// What DWARF says about the global or static variable at `r`, found as `name`.
pub(super) fn variable_info(
    units: &Units,
    r: DieRef,
    name: &str,
    static_local: bool,
) -> Option<VariableInfo> {
    let kind = if static_local {
        VariableKind::StaticLocal
    } else {
        VariableKind::Global
    };
    let mut info = local_info(units, r, kind)?;
    info.name = name.trim().to_owned();
    Some(info)
}
