//! A span's fields formatted only when a log line shows them.
//!
//! `tracing_subscriber`'s fmt layer formats every span's fields into a string when the
//! span starts and again at each `Span::record` (the JSON formatter parses the string
//! back and writes it anew), although at the default level no line is written during
//! almost every call. Here the values are kept as they come, their text copied into
//! one buffer a span, and formatted by the same field formatter only when an event is
//! written inside the span, so every line carries exactly what it carried before
//! (`tests/integration/log_lines.rs` holds the lines; docs/performance.md, "Daemon CPU
//! per call", the cost).
//!
//! Three parts, installed together by [`super::init`] under the fmt layer's filter:
//! - [`KeepSpanValues`], a layer ahead of the fmt layer: it keeps each span's values
//!   ([`SpanValues`]) and leaves an empty `FormattedFields` in the span, which tells the
//!   fmt layer the fields are already taken care of;
//! - [`Deferred`], the fmt layer's field formatter: an event's own fields are formatted
//!   by the inner formatter at once, a span's recorded values are left to the layer;
//! - [`FormatSpansFirst`], the fmt layer's event formatter: it formats the pending
//!   values of every span of the event's scope into their `FormattedFields`, in the
//!   order they were recorded and as the fmt layer would have, then hands the event
//!   to the usual text or JSON formatter.
//!
//! Lines with ANSI colours (on a terminal) keep the stock path: the styles need a
//! writer `tracing_subscriber` does not let another crate make.
//!
//! Where the lines can differ from the stock layer's, for span fields none of the
//! daemon's spans has: an error value is kept as its `Display` text, without the chain
//! of sources the text formatter adds; in text, a value the formatter leaves out (a
//! field named `log.*`, a recorded `Empty`) leaves one space more or less than the
//! stock layer's, which adds the values of one `record` together.

use std::fmt;
use std::marker::PhantomData;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{DefaultFields, JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::{LookupSpan, SpanRef};

/// One value as recorded; text lives in [`SpanValues::text`], by byte range.
#[derive(Debug, Clone, Copy)]
enum Kept {
    Str(u32, u32),
    /// A value already written with `{:?}`.
    Debug(u32, u32),
    I64(i64),
    U64(u64),
    I128(i128),
    U128(u128),
    F64(f64),
    Bool(bool),
    /// Bytes, by range in [`SpanValues::bytes`].
    Bytes(u32, u32),
}

/// A span's values in the order they were recorded (at the span's start, then each
/// `record`), and whether they changed since they were last formatted.
#[derive(Debug, Default)]
pub struct SpanValues {
    values: Vec<(Field, Kept)>,
    /// The text of every `Str` and `Debug` value, one after another.
    text: String,
    /// The bytes of every `Bytes` value (no daemon span records any).
    bytes: Vec<u8>,
    /// Whether the span's `FormattedFields` lag behind `values`.
    pending: bool,
}

impl SpanValues {
    /// The byte range of `write` appended to [`Self::text`].
    fn append(&mut self, write: impl FnOnce(&mut String)) -> (u32, u32) {
        let start = self.text.len();
        write(&mut self.text);
        (offset(start), offset(self.text.len()))
    }

    fn text_of(&self, (start, end): (u32, u32)) -> &str {
        self.text.get(start as usize..end as usize).unwrap_or_default()
    }
}

impl Visit for SpanValues {
    fn record_str(&mut self, field: &Field, value: &str) {
        let (start, end) = self.append(|text| text.push_str(value));
        self.values.push((field.clone(), Kept::Str(start, end)));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        use std::fmt::Write as _;
        let (start, end) = self.append(|text| {
            let _ = write!(text, "{value:?}");
        });
        self.values.push((field.clone(), Kept::Debug(start, end)));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.values.push((field.clone(), Kept::I64(value)));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.values.push((field.clone(), Kept::U64(value)));
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        self.values.push((field.clone(), Kept::I128(value)));
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        self.values.push((field.clone(), Kept::U128(value)));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.values.push((field.clone(), Kept::F64(value)));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.values.push((field.clone(), Kept::Bool(value)));
    }

    fn record_bytes(&mut self, field: &Field, value: &[u8]) {
        let start = offset(self.bytes.len());
        self.bytes.extend_from_slice(value);
        self.values.push((field.clone(), Kept::Bytes(start, offset(self.bytes.len()))));
    }
}

/// A position in [`SpanValues::text`] or [`SpanValues::bytes`] as kept: offsets past
/// 4 GiB cannot happen for a span's fields; saturate anyway.
fn offset(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Text written with `{:?}` already, written as it is.
struct Verbatim<'a>(&'a str);

impl fmt::Debug for Verbatim<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

/// The layer that keeps span values for [`FormatSpansFirst`]. `N` is the fmt layer's
/// field formatter (a [`Deferred`]): the empty `FormattedFields<N>` it leaves is the
/// one the fmt layer and the event formatter look up.
pub struct KeepSpanValues<N>(PhantomData<fn(N)>);

impl<N> Default for KeepSpanValues<N> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

impl<S, N> tracing_subscriber::Layer<S> for KeepSpanValues<N>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: 'static,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut values = SpanValues { pending: true, ..SpanValues::default() };
        attrs.record(&mut values);
        let mut extensions = span.extensions_mut();
        extensions.insert(values);
        extensions.insert(FormattedFields::<N>::new(String::new()));
    }

    fn on_record(&self, id: &Id, record: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut extensions = span.extensions_mut();
        if let Some(values) = extensions.get_mut::<SpanValues>() {
            record.record(values);
            values.pending = true;
        }
    }
}

/// A field formatter `N` whose span fields wait for [`FormatSpansFirst`]: the fmt
/// layer's `add_fields` (its `Span::record` path) writes nothing, since
/// [`KeepSpanValues`] kept the values.
#[derive(Debug, Default)]
pub struct Deferred<N> {
    inner: N,
}

impl<N> Deferred<N> {
    /// Defers `inner`'s span fields.
    pub fn new(inner: N) -> Self {
        Self { inner }
    }
}

impl<'w, N: FormatFields<'w>> FormatFields<'w> for Deferred<N> {
    fn format_fields<R: tracing_subscriber::field::RecordFields>(
        &self,
        writer: Writer<'w>,
        fields: R,
    ) -> fmt::Result {
        self.inner.format_fields(writer, fields)
    }

    fn add_fields(&self, _: &'w mut FormattedFields<Self>, _: &Record<'_>) -> fmt::Result {
        Ok(())
    }
}

/// How a field formatter adds a recorded value to a span's formatted fields, unstyled:
/// what the fmt layer's `on_record` does with it.
pub trait AddFields: for<'w> FormatFields<'w> + 'static {
    /// Adds `record` to `fields`.
    ///
    /// # Errors
    /// The formatter's own (JSON that does not parse back).
    fn add(&self, fields: &mut String, record: &Record<'_>) -> fmt::Result;
}

impl AddFields for DefaultFields {
    fn add(&self, fields: &mut String, record: &Record<'_>) -> fmt::Result {
        let mut current = FormattedFields::<DefaultFields>::new(std::mem::take(fields));
        let added = self.add_fields(&mut current, record);
        *fields = current.fields;
        added
    }
}

impl AddFields for JsonFields {
    fn add(&self, fields: &mut String, record: &Record<'_>) -> fmt::Result {
        // Its `add_fields` merges into the object written so far.
        let mut current = FormattedFields::<JsonFields>::new(std::mem::take(fields));
        let added = self.add_fields(&mut current, record);
        *fields = current.fields;
        added
    }
}

/// The event formatter `E` (the text or the JSON one) after the pending span values of
/// the event's scope are formatted, unstyled: for lines without ANSI colours.
pub struct FormatSpansFirst<E> {
    inner: E,
}

impl<E> FormatSpansFirst<E> {
    /// `inner` formats the event.
    pub fn new(inner: E) -> Self {
        Self { inner }
    }
}

impl<S, N, E> FormatEvent<S, Deferred<N>> for FormatSpansFirst<E>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: AddFields,
    E: FormatEvent<S, Deferred<N>>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, Deferred<N>>,
        writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let fields = &ctx.field_format().inner;
        for span in ctx.event_scope().into_iter().flatten() {
            format_pending(fields, &span)?;
        }
        // The JSON formatter shows the entered span also for an event whose scope is
        // empty (`parent: None`, or a parent the filter disabled).
        if let Some(current) = ctx.lookup_current() {
            format_pending(fields, &current)?;
        }
        self.inner.format_event(ctx, writer, event)
    }
}

/// Formats `span`'s values into its `FormattedFields` if they changed since.
fn format_pending<S, N>(fields: &N, span: &SpanRef<'_, S>) -> fmt::Result
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: AddFields,
{
    let mut extensions = span.extensions_mut();
    let Some(values) = extensions.get_mut::<SpanValues>() else { return Ok(()) };
    if !values.pending {
        return Ok(());
    }
    let formatted = format_values(fields, span.metadata(), values)?;
    values.pending = false;
    if let Some(current) = extensions.get_mut::<FormattedFields<Deferred<N>>>() {
        current.fields = formatted;
    }
    Ok(())
}

/// A span's values formatted as the fmt layer would have: its start's fields (none
/// here, the values follow), then each value added in the order it was recorded.
fn format_values<N: AddFields>(
    fields: &N,
    metadata: &'static tracing::Metadata<'static>,
    values: &SpanValues,
) -> Result<String, fmt::Error> {
    let set = metadata.fields();
    let mut formatted = String::new();
    let none: [(&Field, Option<&dyn tracing::Value>); 0] = [];
    fields.format_fields(Writer::new(&mut formatted), Record::new(&set.value_set(&none)))?;
    for (field, kept) in &values.values {
        let add = |value: &dyn tracing::Value, formatted: &mut String| {
            let one = [(field, Some(value))];
            fields.add(formatted, &Record::new(&set.value_set(&one)))
        };
        match *kept {
            Kept::Str(start, end) => add(&values.text_of((start, end)), &mut formatted)?,
            Kept::Debug(start, end) => {
                add(
                    &tracing::field::debug(Verbatim(values.text_of((start, end)))),
                    &mut formatted,
                )?;
            }
            Kept::I64(v) => add(&v, &mut formatted)?,
            Kept::U64(v) => add(&v, &mut formatted)?,
            Kept::I128(v) => add(&v, &mut formatted)?,
            Kept::U128(v) => add(&v, &mut formatted)?,
            Kept::F64(v) => add(&v, &mut formatted)?,
            Kept::Bool(v) => add(&v, &mut formatted)?,
            Kept::Bytes(start, end) => {
                let bytes = values.bytes.get(start as usize..end as usize).unwrap_or_default();
                add(&bytes, &mut formatted)?;
            }
        }
    }
    Ok(formatted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::fmt::format::format;
    use tracing_subscriber::layer::SubscriberExt;

    /// Lines written to memory.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Lines {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    /// Spans whose values come at their start, later in another order than declared,
    /// twice, after a line was written and in a nested span; values of every kind.
    fn scenario() {
        let outer = tracing::info_span!(
            "rpc",
            otel.name = "portcullis.v1.Governor/Verify",
            realm = tracing::field::Empty,
            outcome = tracing::field::Empty,
            code = tracing::field::Empty,
        );
        let _outer = outer.enter();
        tracing::info!(quoted = "a \"b\"", "before any record");
        outer.record("code", 3_i64);
        outer.record("realm", "default");
        // No parent: the text line shows no span, the JSON line the entered one.
        tracing::info!(parent: None, "without a parent");
        tracing::warn!(n = 7_u64, "after two records");
        let inner = tracing::info_span!(
            "store",
            op = "count",
            wide = 1_u128 << 100,
            flag = true,
            raw = &b"\x01\xff"[..]
        );
        inner.in_scope(|| {
            tracing::info!("nested");
            inner.record("flag", false);
            outer.record("outcome", "refused");
            tracing::info!("nested, after records");
        });
        outer.record("realm", tracing::field::debug(["a", "b"]));
        tracing::error!(ratio = 0.5_f64, big = -(1_i128 << 90), "last");
        let empty = tracing::info_span!("empty");
        empty.in_scope(|| tracing::info!("in an empty span"));
    }

    /// The scenario's lines through the stock fmt layer, text or JSON.
    fn stock(json: bool) -> String {
        let lines = Lines::default();
        let writer = lines.clone();
        let layer = tracing_subscriber::fmt::layer().with_ansi(false).without_time();
        let subscriber = tracing_subscriber::registry();
        if json {
            let layer = layer.json().with_current_span(true).with_span_list(false);
            let layer = layer.with_writer(move || writer.clone());
            tracing::subscriber::with_default(subscriber.with(layer), scenario);
        } else {
            let layer = layer.with_writer(move || writer.clone());
            tracing::subscriber::with_default(subscriber.with(layer), scenario);
        }
        lines.text()
    }

    /// The scenario's lines through the deferred layer, `N` formatting the fields.
    fn deferred<N: AddFields + Default + Send + Sync>(
        event: impl FormatEvent<tracing_subscriber::Registry, Deferred<N>> + Send + Sync + 'static,
    ) -> String {
        let lines = Lines::default();
        let writer = lines.clone();
        let layer = KeepSpanValues::<Deferred<N>>::default().and_then(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .fmt_fields(Deferred::new(N::default()))
                .event_format(FormatSpansFirst::new(event))
                .with_writer(move || writer.clone()),
        );
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), scenario);
        lines.text()
    }

    #[test]
    fn text_lines_are_what_the_stock_layer_writes() {
        let expected = stock(false);
        assert!(
            expected.contains(
                r#"rpc{otel.name="portcullis.v1.Governor/Verify" code=3 realm="default"}"#
            ),
            "{expected}"
        );
        assert_eq!(deferred::<DefaultFields>(format().without_time()), expected);
    }

    #[test]
    fn json_lines_are_what_the_stock_layer_writes() {
        let expected = stock(true);
        assert!(expected.contains(r#""outcome":"refused""#), "{expected}");
        let json = format().without_time().json().with_current_span(true).with_span_list(false);
        assert_eq!(deferred::<JsonFields>(json), expected);
    }
}
