//! The facts a snippet may ask of a point (`$function $module $file $line $callee $loop`,
//! and the type `$return` has there): the same [`PointInfo`] whether `at` checks a snippet,
//! `save` compiles it or a live process does.

use crate::addr::LinkAddr;
use crate::snippet::env::{PointInfo, PointKind};
use crate::snippet::types::Type;

use super::{Point, PointSource};

/// What the snippet constants say at `p` for request `id`. `c_type` turns DWARF's spelling
/// of a C type into a snippet type (the instrumentation layer knows the typedefs).
pub fn facts(
    module: &(impl PointSource + ?Sized),
    p: &Point,
    id: u32,
    c_type: &dyn Fn(&str) -> Option<Type>,
) -> PointInfo {
    let func = module.functions().get(p.func);
    let loc = module.line(p.addr);
    let return_of = |addr: Option<LinkAddr>| c_type(&module.return_type(addr?)?);
    let kind = p.kind.snippet_kind();
    let return_type = match kind {
        PointKind::Exit => return_of(Some(func.addr)),
        PointKind::CallAfter => return_of(p.callee),
        _ => None,
    };
    let (file, line) = loc.map_or((None, None), |(f, l)| (Some(f), Some(l)));
    PointInfo {
        kind,
        function: func.display_name().to_owned(),
        module: module.name().to_owned(),
        file,
        line,
        callee: p.callee_name.clone(),
        loop_name: p.loop_name.clone(),
        id,
        return_type,
        internal: false,
    }
}
