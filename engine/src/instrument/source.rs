//! A session's module as the point layer sees it ([`PointSource`]): its code, functions, CFGs
//! and loops from the analysis, its source lines and return types from DWARF. Here, where the
//! session and the points meet, so that `point` never imports the session.

use crate::addr::LinkAddr;
use crate::cfg::loops::LoopForest;
use crate::cfg::Cfg;
use crate::point::PointSource;
use crate::session::Module;
use crate::symbols::{FuncId, FunctionTable};

impl PointSource for Module {
    fn name(&self) -> &str {
        &self.name
    }

    fn functions(&self) -> &FunctionTable {
        Module::functions(self)
    }

    fn cfg(&self, f: FuncId) -> &Cfg {
        &self.analysis().function(f).cfg
    }

    fn loops(&self, f: FuncId) -> &LoopForest {
        &self.analysis().function(f).loops
    }

    fn bytes_at(&self, addr: LinkAddr, len: u64) -> Option<&[u8]> {
        self.binary.bytes_at(addr, len)
    }

    fn line(&self, addr: LinkAddr) -> Option<(String, u32)> {
        let loc = self.debug_info()?.location(addr)?;
        Some((loc.file, loc.line))
    }

    fn return_type(&self, func: LinkAddr) -> Option<String> {
        Some(self.debug_info()?.function(func)?.return_type)
    }
}
