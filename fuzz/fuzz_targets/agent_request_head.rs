//! The gateway's rule for which request heads it answers itself (an agent's, in the one plain
//! case) on arbitrary bytes: it never panics, and a head it takes is one it can serve safely —
//! an agent route's path, exactly one all-digit `Content-Length` within the endpoint's limit, no
//! `Transfer-Encoding`, `Expect` or `Upgrade`, and a length inside the bytes it was given.
#![no_main]

use capstan_gateway::domain::agent_request::{Head, Parsed};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Parsed::Complete(head) = Head::parse(data) else {
        return;
    };
    assert!(head.length <= data.len());
    let Some(lane) = head.lane else { return };
    assert!(lane.content_length <= lane.endpoint.body_limit());
    assert_eq!(lane.uri.path(), lane.route.path);
    assert_eq!(lane.headers.get_all("content-length").iter().count(), 1);
    for refused in ["transfer-encoding", "expect", "upgrade"] {
        assert!(!lane.headers.contains_key(refused), "{refused} taken");
    }
});
