//! The facts a snippet may ask of a point (`$function $module $file $line $callee $loop`,
//! and the type `$return` has there): the same [`PointInfo`] whether `at` checks a snippet,
//! `save` compiles it or a live process does.

use crate::addr::LinkAddr;
use crate::session::Module;
use crate::snippet::env::{PointInfo, PointKind};
use crate::snippet::types::Type;

use super::Point;

/// What the snippet constants say at `p` for request `id`. `c_type` turns DWARF's spelling
/// of a C type into a snippet type (the instrumentation layer knows the typedefs).
pub fn facts(
    module: &Module,
    p: &Point,
    id: u32,
    c_type: &dyn Fn(&str) -> Option<Type>,
) -> PointInfo {
    let func = module.functions().get(p.func);
    let debug = module.debug_info();
    let loc = debug.and_then(|d| d.location(p.addr));
    let return_of = |addr: Option<LinkAddr>| -> Option<Type> {
        let info = debug?.function(addr?)?;
        c_type(&info.return_type)
    };
    let kind = p.kind.snippet_kind();
    let return_type = match kind {
        PointKind::Exit => return_of(Some(func.addr)),
        PointKind::CallAfter => return_of(p.callee),
        _ => None,
    };
    PointInfo {
        kind,
        function: func.display_name().to_owned(),
        module: module.name.clone(),
        file: loc.as_ref().map(|l| l.file.clone()),
        line: loc.map(|l| l.line),
        callee: p.callee_name.clone(),
        loop_name: p.loop_name.clone(),
        id,
        return_type,
        internal: false,
    }
}
