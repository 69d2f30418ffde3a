//! The service's use cases that span its rooms: a provision's run (`workflow.rs`), the
//! auto-approval pass over pending joins (`approval.rs`), and the alarms raised on the plane's
//! own node (`alarms.rs`).

pub mod alarms;
pub mod approval;
pub mod workflow;
