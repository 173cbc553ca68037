//! Responses, as a gateway reads its upstream's answers: the id, and either the
//! raw `result` or the error's code, message and raw `data`.

use bumpalo::Bump;

use crate::envelope::{
    MemberName, Name, Parser, Span, colon, expect_end, first_member, for_each_element, next_member,
    read_member_name, read_string,
};
use crate::error::{Error, ErrorKind, Member};
use crate::scan::{self, eof, err, skip_ws};
use crate::value::{Id, JsonStr, RawValue, parse_i64};

/// One parsed response message: a single response or a batch of them.
#[derive(Clone, Debug)]
pub enum ResponseMessage<'a> {
    /// A single response.
    Single(Response<'a>),
    /// A non-empty batch of responses, validated, in order.
    Batch(ResponseBatch<'a>),
}

/// A JSON-RPC 2.0 response, borrowed from the message.
///
/// ```
/// let arena = bumpalo::Bump::new();
/// let msg = rpcwire::parse_response(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"execution reverted","data":"0x08c379a0"}}"#, &arena)?;
/// let rpcwire::ResponseMessage::Single(response) = msg else { unreachable!() };
/// let error = response.result().unwrap_err();
/// assert_eq!(error.code(), -32000);
/// assert_eq!(error.message().as_str(), Some("execution reverted"));
/// assert_eq!(error.data().unwrap().as_bytes(), br#""0x08c379a0""#);
/// # Ok::<(), rpcwire::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response<'a> {
    id: Id<'a>,
    outcome: Result<RawValue<'a>, ErrorObject<'a>>,
}

impl<'a> Response<'a> {
    /// The id, byte for byte (`null` when the server could not read the
    /// request's id).
    pub fn id(&self) -> Id<'a> {
        self.id
    }

    /// The raw `result`, or the error object.
    pub fn result(&self) -> Result<RawValue<'a>, ErrorObject<'a>> {
        self.outcome
    }

    /// Whether the response carries an error.
    pub fn is_error(&self) -> bool {
        self.outcome.is_err()
    }
}

/// The `error` member of a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorObject<'a> {
    code: i64,
    message: JsonStr<'a>,
    data: Option<RawValue<'a>>,
}

impl<'a> ErrorObject<'a> {
    /// The error code.
    pub fn code(&self) -> i64 {
        self.code
    }

    /// The message, still escaped; see [`JsonStr`].
    pub fn message(&self) -> JsonStr<'a> {
        self.message
    }

    /// The raw `data`, if present.
    pub fn data(&self) -> Option<RawValue<'a>> {
        self.data
    }
}

/// The responses of a batch, in order; each is `Err` if that element is not a
/// valid response. Read in the one validating pass of
/// [`Parser::parse_response`] and kept in its arena.
#[derive(Clone, Debug)]
pub struct ResponseBatch<'a> {
    items: core::slice::Iter<'a, Result<Response<'a>, Error>>,
}

impl<'a> ResponseBatch<'a> {
    /// The responses not yet iterated, in order.
    pub fn as_slice(&self) -> &'a [Result<Response<'a>, Error>] {
        self.items.as_slice()
    }
}

impl<'a> Iterator for ResponseBatch<'a> {
    type Item = Result<Response<'a>, Error>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        self.items.next().copied()
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.items.size_hint()
    }
}

impl ExactSizeIterator for ResponseBatch<'_> {}

/// Parses one response message with the default limits; see
/// [`Parser::parse_response`].
pub fn parse_response<'a>(input: &'a [u8], arena: &'a Bump) -> Result<ResponseMessage<'a>, Error> {
    Parser::new().parse_response(input, arena)
}

impl Parser {
    /// Parses one JSON-RPC response message: a single response or a batch.
    ///
    /// The whole input is validated as JSON, under the same limits as
    /// requests (the batch length limit does not apply: answers are bounded
    /// by the requests sent). A single invalid response is an `Err`; in a
    /// batch, each invalid element is an `Err` in its place. A batch's
    /// responses are kept in `arena`, a few words each.
    pub fn parse_response<'a>(
        &self,
        input: &'a [u8],
        arena: &'a Bump,
    ) -> Result<ResponseMessage<'a>, Error> {
        if input.len() > self.message_len_limit() {
            return err(ErrorKind::MessageTooLarge, self.message_len_limit());
        }
        let max_depth = self.depth_limit();
        let pos = skip_ws(input, 0);
        match input.get(pos) {
            Some(b'{') => {
                let (fields, end) = read_response(input, pos, 0, max_depth)?;
                expect_end(input, end)?;
                fields.into_response(input).map(ResponseMessage::Single)
            }
            Some(b'[') => {
                let mut items = bumpalo::collections::Vec::new_in(arena);
                let end = for_each_element(input, pos, max_depth, |p| {
                    let (item, end) = if input[p] == b'{' {
                        let (fields, end) = read_response(input, p, 1, max_depth)?;
                        (fields.into_response(input), end)
                    } else {
                        let end = scan::skip_value(input, p, 1, max_depth)?;
                        (Err(Error::new(ErrorKind::NotObject, p)), end)
                    };
                    items.push(item);
                    Ok(end)
                })?;
                expect_end(input, end)?;
                if items.is_empty() {
                    return err(ErrorKind::EmptyBatch, pos);
                }
                let items = items.into_bump_slice().iter();
                Ok(ResponseMessage::Batch(ResponseBatch { items }))
            }
            Some(_) => {
                let end = scan::skip_value(input, pos, 0, max_depth)?;
                expect_end(input, end)?;
                err(ErrorKind::NotObjectOrArray, pos)
            }
            None => eof(input),
        }
    }
}

const RESPONSE_MEMBERS: [MemberName; 4] = [
    MemberName::new(b"jsonrpc\"", Member::Jsonrpc),
    MemberName::new(b"id\"", Member::Id),
    MemberName::new(b"result\"", Member::Result),
    MemberName::new(b"error\"", Member::Error),
];

const ERROR_MEMBERS: [MemberName; 3] = [
    MemberName::new(b"code\"", Member::Code),
    MemberName::new(b"message\"", Member::Message),
    MemberName::new(b"data\"", Member::Data),
];

#[derive(Debug, Default)]
struct ResponseFields {
    start: usize,
    seen: u16,
    id: Option<Span>,
    result: Option<Span>,
    code: Option<i64>,
    /// The message's content between the quotes.
    message: Option<(Span, bool)>,
    data: Option<Span>,
    problem: Option<Error>,
}

impl ResponseFields {
    fn mark_seen(&mut self, member: Member, at: usize) {
        let bit = 1u16 << member as u8;
        if self.seen & bit != 0 {
            self.problem(ErrorKind::Duplicate(member), at);
        }
        self.seen |= bit;
    }

    fn problem(&mut self, kind: ErrorKind, at: usize) {
        if self.problem.is_none() {
            self.problem = Some(Error::new(kind, at));
        }
    }

    fn has(&self, member: Member) -> bool {
        self.seen & (1 << member as u8) != 0
    }

    fn into_response(self, input: &[u8]) -> Result<Response<'_>, Error> {
        let fail = |kind| Err(Error::new(kind, self.start));
        if let Some(e) = self.problem {
            return Err(e);
        }
        if !self.has(Member::Jsonrpc) {
            return fail(ErrorKind::Missing(Member::Jsonrpc));
        }
        let Some(id) = self.id else {
            return fail(ErrorKind::Missing(Member::Id));
        };
        let id = Id::from_validated(id.of(input));
        let outcome = match (self.result, self.has(Member::Error)) {
            (Some(_), true) => return fail(ErrorKind::BothResultAndError),
            (Some(result), false) => Ok(RawValue::from_validated(result.of(input))),
            (None, true) => {
                let Some(code) = self.code else {
                    return fail(ErrorKind::Missing(Member::Code));
                };
                let Some((message, escaped)) = self.message else {
                    return fail(ErrorKind::Missing(Member::Message));
                };
                Err(ErrorObject {
                    code,
                    message: JsonStr::from_content(message.of(input), escaped),
                    data: self.data.map(|d| RawValue::from_validated(d.of(input))),
                })
            }
            (None, false) => return fail(ErrorKind::Missing(Member::Result)),
        };
        Ok(Response { id, outcome })
    }
}

fn read_response(
    input: &[u8],
    mut pos: usize,
    depth: u32,
    max_depth: u32,
) -> Result<(ResponseFields, usize), Error> {
    let mut f = ResponseFields {
        start: pos,
        ..ResponseFields::default()
    };
    let inner = depth + 1;
    let mut more = first_member(input, &mut pos, depth, max_depth)?;
    while more {
        let name_at = pos;
        let (member, after_name) = read_member_name(input, pos, &RESPONSE_MEMBERS)?;
        pos = colon(input, after_name)?;
        let at = pos;
        let end = scan::skip_value(input, pos, inner, max_depth)?;
        let value = &input[pos..end];
        match member {
            Name::Member(Member::Jsonrpc) => {
                f.mark_seen(Member::Jsonrpc, name_at);
                let ok = value == b"\"2.0\""
                    || (value.first() == Some(&b'"')
                        && scan::unescaped_eq(&value[1..value.len() - 1], true, b"2.0"));
                if !ok {
                    f.problem(ErrorKind::WrongVersion, at);
                }
            }
            Name::Member(Member::Id) => {
                f.mark_seen(Member::Id, name_at);
                if matches!(value[0], b'"' | b'-' | b'0'..=b'9' | b'n') {
                    f.id = Some(Span { start: at, end });
                } else {
                    f.problem(ErrorKind::WrongType(Member::Id), at);
                }
            }
            Name::Member(Member::Result) => {
                f.mark_seen(Member::Result, name_at);
                f.result = Some(Span { start: at, end });
            }
            Name::Member(Member::Error) => {
                f.mark_seen(Member::Error, name_at);
                if value[0] == b'{' {
                    read_error_object(input, at, &mut f)?;
                } else {
                    f.problem(ErrorKind::WrongType(Member::Error), at);
                }
            }
            Name::Undecodable => f.problem(ErrorKind::UndecodableName, name_at),
            _ => {}
        }
        pos = end;
        more = next_member(input, &mut pos)?;
    }
    Ok((f, pos))
}

/// Reads the members of the error object at `pos`, already validated by the
/// caller's skip of the whole value.
fn read_error_object(input: &[u8], mut pos: usize, f: &mut ResponseFields) -> Result<(), Error> {
    let mut more = first_member(input, &mut pos, 0, u32::MAX)?;
    while more {
        let name_at = pos;
        let (member, after_name) = read_member_name(input, pos, &ERROR_MEMBERS)?;
        pos = colon(input, after_name)?;
        let at = pos;
        let end = scan::skip_value_trusted(input, pos);
        let value = &input[pos..end];
        match member {
            Name::Member(Member::Code) => {
                f.mark_seen(Member::Code, name_at);
                match parse_i64(value) {
                    Some(code) => f.code = Some(code),
                    None => f.problem(ErrorKind::WrongType(Member::Code), at),
                }
            }
            Name::Member(Member::Message) => {
                f.mark_seen(Member::Message, name_at);
                if value[0] == b'"' {
                    let (_, escaped) = read_string(input, pos)?;
                    f.message = Some((
                        Span {
                            start: pos + 1,
                            end: end - 1,
                        },
                        escaped,
                    ));
                } else {
                    f.problem(ErrorKind::WrongType(Member::Message), at);
                }
            }
            Name::Member(Member::Data) => {
                f.mark_seen(Member::Data, name_at);
                f.data = Some(Span { start: at, end });
            }
            _ => {}
        }
        pos = end;
        more = next_member(input, &mut pos)?;
    }
    Ok(())
}
