//! A body runs in its caller's span, whichever thread runs it (a blocking thread, the
//! group-commit thread): what it logs names the caller's operation.

use crate::test_store;
use std::sync::{Arc, Mutex};
use tracing::Instrument;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

/// An event's message, with the `op_id` of the span it was made in (if any).
type Event = (String, Option<String>);

/// Every event made, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Event>>>);

/// One field's value, by name.
struct Field1(&'static str, Option<String>);

impl Visit for Field1 {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == self.0 {
            self.1 = Some(format!("{value:?}").trim_matches('"').to_owned());
        }
    }
}

struct OpId(Option<String>);

impl<S> tracing_subscriber::Layer<S> for Seen
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        let mut op_id = Field1("op_id", None);
        attrs.record(&mut op_id);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(OpId(op_id.1));
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let op_id = ctx
            .event_span(event)
            .and_then(|span| span.extensions().get::<OpId>().and_then(|o| o.0.clone()));
        let mut message = Field1("message", None);
        event.record(&mut message);
        self.0
            .lock()
            .unwrap()
            .push((message.1.unwrap_or_default(), op_id));
    }
}

#[test]
fn a_body_logs_in_its_caller_s_span_on_a_blocking_thread_and_on_the_group_commit_thread() {
    let seen = Seen::default();
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(seen.clone()))
        .unwrap();
    let t = test_store("spans");
    let store = t.store.clone();
    let key = store.root().pack(&("k", "spans"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let k = key.clone();
        store
            .run_async(move |tx| {
                tracing::info!("run_async");
                tx.set(&k, b"1")
            })
            .instrument(tracing::info_span!("op", op_id = "op-a"))
            .await
            .unwrap();
        let k = key.clone();
        store
            .run_grouped(move |tx| {
                tracing::info!("run_grouped");
                tx.set(&k, b"2")
            })
            .instrument(tracing::info_span!("op", op_id = "op-b"))
            .await
            .unwrap();
        let k = key.clone();
        store
            .read_async(move |tx| {
                tracing::info!("read_async");
                tx.get(&k)
            })
            .instrument(tracing::info_span!("op", op_id = "op-c"))
            .await
            .unwrap();
    });
    let seen = seen.0.lock().unwrap().clone();
    for (message, op_id) in [
        ("run_async", "op-a"),
        ("run_grouped", "op-b"),
        ("read_async", "op-c"),
    ] {
        let spans: Vec<Option<String>> = seen
            .iter()
            .filter(|(m, _)| m == message)
            .map(|(_, op)| op.clone())
            .collect();
        assert!(!spans.is_empty(), "{message}: its body logged nothing");
        assert!(
            spans.iter().all(|op| op.as_deref() == Some(op_id)),
            "{message}: logged in {spans:?}, not in {op_id}'s span"
        );
    }
}
