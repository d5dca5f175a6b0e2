//! What the analysis commands (`loops`, `cfg`, `callers`, `callees`, `stats`, and the metrics
//! of `whatis` and `show functions --sort`) share: the whole-module analysis, run with a
//! progress bar the first time it is needed, and the resolution of FUNC into functions.

use anyhow::{bail, Result};
use engine::analysis::Analysis;
use engine::{FuncRef, LinkAddr, ModuleId};

use crate::context::Context;
use crate::progress::Bar;

/// The analysis of module `m`, run now (with a progress bar on a terminal) if it has not been.
pub fn analysis(ctx: &Context, m: ModuleId) -> &Analysis {
    let module = ctx.session.module(m);
    if module.analysis_ready() {
        return module.analysis();
    }
    let bar = Bar::new(format!("analysing {}", module.name));
    module.analysis_with(&bar)
}

/// Every function FUNC names: `NAME`, `MODULE!NAME`, `0xADDR`, or a glob.
pub fn resolve_many(ctx: &mut Context, spec: &str) -> Result<Vec<FuncRef>> {
    let found = ctx.session.resolve_functions(spec)?;
    if found.is_empty() {
        bail!("no function matches `{spec}`");
    }
    Ok(found)
}

/// The one function FUNC names; a glob or name matching several is an error listing them.
pub fn resolve_one(ctx: &mut Context, spec: &str, command: &str) -> Result<FuncRef> {
    let found = resolve_many(ctx, spec)?;
    if let [one] = found[..] {
        return Ok(one);
    }
    let names: Vec<String> = found
        .iter()
        .take(5)
        .map(|f| {
            let func = ctx.session.func(*f);
            format!("{} at {}", func.display_name(), func.addr)
        })
        .collect();
    bail!(
        "`{spec}` matches {} functions ({}{}); `{command}` takes one: name it by address",
        found.len(),
        names.join(", "),
        if found.len() > 5 { ", ..." } else { "" }
    )
}

/// The name of what a call or jump to `target` reaches in module `m`: a function's name
/// (`puts@plt` for a PLT stub), `name+0x12` inside one, or the bare address.
pub fn target_name(ctx: &Context, m: ModuleId, target: LinkAddr) -> String {
    let module = ctx.session.module(m);
    match module.functions().at(target) {
        Some(f) => f.display_name().to_owned(),
        None => module
            .describe(target)
            .unwrap_or_else(|| target.to_string()),
    }
}

/// `name` of a function, with ` (in MODULE)` when it is not in the main module.
pub fn qualified(ctx: &Context, r: FuncRef) -> String {
    let name = ctx.session.func(r).display_name();
    let module = ctx.session.module(r.module);
    if module.is_main {
        name.to_owned()
    } else {
        format!("{}!{name}", module.name)
    }
}
