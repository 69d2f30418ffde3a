//! W3C trace context across process boundaries: the bus (NATS headers), the outbox (a column)
//! and HTTP. Only `traceparent` travels; it is all a receiver needs to continue the trace.

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use std::collections::HashMap;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The header that carries the trace.
pub const TRACEPARENT: &str = "traceparent";

/// The `traceparent` of the current span, if it belongs to a trace.
pub fn current_traceparent() -> Option<String> {
    let context = tracing::Span::current().context();
    let mut carrier: HashMap<String, String> = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// Makes `span` a child of the trace `traceparent` names; a missing or malformed value leaves
/// the span as the root of a new trace.
pub fn set_parent(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(traceparent) = traceparent else {
        return;
    };
    let carrier = HashMap::from([(TRACEPARENT.to_string(), traceparent.to_string())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    let _ = span.set_parent(context);
}
