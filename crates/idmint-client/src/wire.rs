//! The calls the client makes, each in both encodings: gRPC (`idmint.v1.IdMint`, see
//! `crates/idmint-proto/proto/idmint/v1/idmint.proto`) and the HTTP JSON routes that mirror
//! it. Answers are checked before use (ranges valid and increasing, as many ids as asked);
//! a malformed answer fails the attempt like a server that is down.
//!
//! This file must not retry or pick servers (`endpoints.rs`) nor keep state.

use std::fmt::Write as _;

use idmint_core::limits::{ID_MAX, ID_MIN};
use idmint_proto::v1 as pb;
use idmint_proto::v1::id_mint_client::IdMintClient;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;

use crate::endpoints::{Http, Op, grpc_request};
use crate::error::{Failure, from_http, from_status};
use crate::ids::{PublicIds, SequenceIds};
use crate::limits::STREAM_CHUNK_IDS;

/// A range a server leased, with its proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WireLease {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) proof: u64,
}

/// A tag or sequence name as one URL path segment: every byte outside the unreserved set
/// (`A-Z a-z 0-9 - . _ ~`) percent-encoded, so `user/login`, `订单` or `a b` reach the
/// server as the one name they are.
fn segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// NextRange: `count` ids of a tag as leases.
pub(crate) struct NextRange<'a> {
    pub(crate) tag: &'a str,
    pub(crate) count: u64,
}

/// ReturnRange: gives back `[start, end)` of `leases`; answers the ids taken back.
pub(crate) struct ReturnRange<'a> {
    pub(crate) tag: &'a str,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) leases: &'a [WireLease],
}

/// What a server named with a strict tag's ids (`idmint-node`, `idmint-owner`): itself and
/// the tag's owner as it knows them, each as the nodes reach one another. Empty for other
/// tags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Named {
    pub(crate) node: Option<String>,
    pub(crate) owner: Option<String>,
}

impl Named {
    /// Read by `key` from an answer's headers or metadata.
    fn read(key: impl Fn(&str) -> Option<String>) -> Named {
        Named { node: key("idmint-node"), owner: key("idmint-owner") }
    }
}

/// NextIds: `count` public ids of a tag.
pub(crate) struct NextIds<'a> {
    pub(crate) tag: &'a str,
    pub(crate) count: u64,
}

/// NextSnowflakeIds: `count` snowflake ids.
pub(crate) struct NextSnowflake {
    pub(crate) count: u64,
}

/// NextSequenceIds: `count` numbers of a sequence.
pub(crate) struct NextSequence<'a> {
    pub(crate) name: &'a str,
    pub(crate) count: u64,
}

/// StreamIds: opens a stream of up to `count` ids (gRPC), or takes the first batch of them
/// (HTTP, at most `batch` ids).
pub(crate) struct OpenStream<'a> {
    pub(crate) tag: &'a str,
    pub(crate) count: u64,
    pub(crate) batch: u64,
}

/// What [`OpenStream`] answers.
pub(crate) enum Opened {
    /// A gRPC stream to read chunks from.
    Grpc(tonic::Streaming<pb::StreamIdsResponse>),
    /// An HTTP batch; the next one is another call.
    Batch(PublicIds),
}

/// Whether a server answers at all (any answer of idmint's counts).
pub(crate) struct Ping;

impl Op for NextRange<'_> {
    type Output = Vec<WireLease>;

    async fn grpc(
        &self,
        mut client: IdMintClient<Channel>,
        auth: Option<MetadataValue<Ascii>>,
    ) -> Result<Vec<WireLease>, Failure> {
        let request = pb::NextRangeRequest { tag: self.tag.to_string(), count: self.count };
        let answer = client
            .next_range(grpc_request(request, auth))
            .await
            .map_err(|s| from_status(&s, self.tag))?
            .into_inner();
        let leases =
            answer.ranges.iter().map(|r| WireLease { start: r.start, end: r.end, proof: r.proof });
        checked_leases(leases.collect(), self.count)
    }

    async fn http(&self, http: Http<'_>) -> Result<Vec<WireLease>, Failure> {
        #[derive(Deserialize)]
        struct Answer {
            ranges: Vec<JsonLease>,
        }
        let path = format!("/v1/segment/{}/ranges?count={}", segment(self.tag), self.count);
        let answer: Answer = get(http, &path, self.tag).await?;
        let leases = answer.ranges.iter().map(JsonLease::parse).collect::<Result<Vec<_>, _>>()?;
        checked_leases(leases, self.count)
    }
}

impl Op for ReturnRange<'_> {
    type Output = u64;

    async fn grpc(
        &self,
        mut client: IdMintClient<Channel>,
        auth: Option<MetadataValue<Ascii>>,
    ) -> Result<u64, Failure> {
        let request = pb::ReturnRangeRequest {
            tag: self.tag.to_string(),
            start: self.start,
            end: self.end,
            leases: self
                .leases
                .iter()
                .map(|l| pb::Range { start: l.start, end: l.end, proof: l.proof })
                .collect(),
        };
        let answer = client
            .return_range(grpc_request(request, auth))
            .await
            .map_err(|s| from_status(&s, self.tag))?
            .into_inner();
        self.checked(answer.returned)
    }

    async fn http(&self, http: Http<'_>) -> Result<u64, Failure> {
        #[derive(Serialize)]
        struct Body {
            start: u64,
            end: u64,
            leases: Vec<JsonLease>,
        }
        #[derive(Deserialize)]
        struct Answer {
            returned: u64,
        }
        let body = Body {
            start: self.start,
            end: self.end,
            leases: self.leases.iter().map(JsonLease::from).collect(),
        };
        let path = format!("/v1/segment/{}/return", segment(self.tag));
        let answer: Answer = post(http, &path, &body, self.tag).await?;
        self.checked(answer.returned)
    }
}

impl ReturnRange<'_> {
    fn checked(&self, returned: u64) -> Result<u64, Failure> {
        // All, none, or the top part that lies in the server's current segment.
        let len = self.end.saturating_sub(self.start);
        if returned <= len {
            Ok(returned)
        } else {
            Err(Failure::down(format!("took back {returned} of {len} ids; at most all expected")))
        }
    }
}

impl Op for NextIds<'_> {
    type Output = (PublicIds, Named);

    async fn grpc(
        &self,
        mut client: IdMintClient<Channel>,
        auth: Option<MetadataValue<Ascii>>,
    ) -> Result<(PublicIds, Named), Failure> {
        let request = pb::NextIdsRequest { tag: self.tag.to_string(), count: self.count };
        let answer = client
            .next_ids(grpc_request(request, auth))
            .await
            .map_err(|s| from_status(&s, self.tag))?;
        let metadata = answer.metadata();
        let named = Named::read(|key| Some(metadata.get(key)?.to_str().ok()?.to_string()));
        let answer = answer.into_inner();
        Ok((checked_ids(answer.ids, answer.texts, self.count)?, named))
    }

    async fn http(&self, http: Http<'_>) -> Result<(PublicIds, Named), Failure> {
        #[derive(Deserialize)]
        struct Answer {
            ids: Vec<JsonId>,
        }
        let path = format!("/v1/segment/{}?count={}", segment(self.tag), self.count);
        let request = with_token(http.client.get(format!("{}{path}", http.base)), http);
        let (answer, headers): (Answer, _) = answer_with_headers(request, self.tag).await?;
        let named = Named::read(|key| Some(headers.get(key)?.to_str().ok()?.to_string()));
        Ok((checked_json_ids(answer.ids, self.count)?, named))
    }
}

impl Op for NextSnowflake {
    type Output = Vec<u64>;

    async fn grpc(
        &self,
        mut client: IdMintClient<Channel>,
        auth: Option<MetadataValue<Ascii>>,
    ) -> Result<Vec<u64>, Failure> {
        let request = pb::NextSnowflakeIdsRequest { count: self.count };
        let answer = client
            .next_snowflake_ids(grpc_request(request, auth))
            .await
            .map_err(|s| from_status(&s, ""))?
            .into_inner();
        checked_numbers(answer.ids, self.count)
    }

    async fn http(&self, http: Http<'_>) -> Result<Vec<u64>, Failure> {
        #[derive(Deserialize)]
        struct Answer {
            ids: Vec<u64>,
        }
        let path = format!("/v1/snowflake?count={}", self.count);
        let answer: Answer = get(http, &path, "").await?;
        checked_numbers(answer.ids, self.count)
    }
}

impl Op for NextSequence<'_> {
    type Output = SequenceIds;

    async fn grpc(
        &self,
        mut client: IdMintClient<Channel>,
        auth: Option<MetadataValue<Ascii>>,
    ) -> Result<SequenceIds, Failure> {
        let request = pb::NextSequenceIdsRequest { name: self.name.to_string(), count: self.count };
        let answer = client
            .next_sequence_ids(grpc_request(request, auth))
            .await
            .map_err(|s| from_status(&s, self.name))?
            .into_inner();
        Ok(SequenceIds {
            name: answer.name,
            period: Some(answer.period).filter(|p| !p.is_empty()),
            ids: checked_ids(answer.ids, answer.texts, self.count)?,
        })
    }

    async fn http(&self, http: Http<'_>) -> Result<SequenceIds, Failure> {
        #[derive(Deserialize)]
        struct Answer {
            name: String,
            #[serde(default)]
            period: Option<String>,
            ids: Vec<JsonId>,
        }
        let path = format!("/v1/seq/{}?count={}", segment(self.name), self.count);
        let answer: Answer = get(http, &path, self.name).await?;
        Ok(SequenceIds {
            name: answer.name,
            period: answer.period.filter(|p| !p.is_empty()),
            ids: checked_json_ids(answer.ids, self.count)?,
        })
    }
}

impl Op for OpenStream<'_> {
    type Output = Opened;

    async fn grpc(
        &self,
        mut client: IdMintClient<Channel>,
        auth: Option<MetadataValue<Ascii>>,
    ) -> Result<Opened, Failure> {
        let request = pb::StreamIdsRequest {
            tag: self.tag.to_string(),
            count: self.count,
            chunk: STREAM_CHUNK_IDS,
        };
        let stream = client
            .stream_ids(grpc_request(request, auth))
            .await
            .map_err(|s| from_status(&s, self.tag))?
            .into_inner();
        Ok(Opened::Grpc(stream))
    }

    async fn http(&self, http: Http<'_>) -> Result<Opened, Failure> {
        let batch = NextIds { tag: self.tag, count: self.count.min(self.batch) };
        Ok(Opened::Batch(batch.http(http).await?.0))
    }
}

impl Op for Ping {
    type Output = ();

    async fn grpc(
        &self,
        mut client: IdMintClient<Channel>,
        auth: Option<MetadataValue<Ascii>>,
    ) -> Result<(), Failure> {
        // Cheap and stateless: any node decodes an id under a preset layout.
        let request = pb::DecodeSnowflakeRequest { id: 1, layout: "snowflake".to_string() };
        match client.decode_snowflake(grpc_request(request, auth)).await {
            Ok(_) => Ok(()),
            // An idmint error answer still proves the server answers.
            Err(status) if status.metadata().contains_key("idmint-code") => Ok(()),
            Err(status) => Err(from_status(&status, "")),
        }
    }

    async fn http(&self, http: Http<'_>) -> Result<(), Failure> {
        let response = with_token(http.client.get(format!("{}/health", http.base)), http)
            .send()
            .await
            .map_err(|e| Failure::down(format!("HTTP request failed: {e}")))?;
        let status = response.status().as_u16();
        if (200..300).contains(&status) {
            Ok(())
        } else {
            let body = response.bytes().await.unwrap_or_default();
            Err(from_http(status, &body, ""))
        }
    }
}

/// A stream chunk as public ids.
pub(crate) fn chunk_ids(chunk: pb::StreamIdsResponse) -> Result<PublicIds, Failure> {
    let count = (chunk.ids.len() + chunk.texts.len()) as u64;
    checked_ids(chunk.ids, chunk.texts, count.max(1))
}

/// A lease as the HTTP routes write it: the proof as 16 lowercase hex digits.
#[derive(Serialize, Deserialize)]
struct JsonLease {
    start: u64,
    end: u64,
    proof: String,
}

impl JsonLease {
    fn parse(&self) -> Result<WireLease, Failure> {
        let proof = Some(&self.proof)
            .filter(|p| p.len() == 16)
            .and_then(|p| u64::from_str_radix(p, 16).ok())
            .ok_or_else(|| Failure::down(format!("malformed lease proof {:?}", self.proof)))?;
        Ok(WireLease { start: self.start, end: self.end, proof })
    }
}

impl From<&WireLease> for JsonLease {
    fn from(lease: &WireLease) -> JsonLease {
        let mut proof = String::with_capacity(16);
        // Writing to a String cannot fail.
        let _ = write!(proof, "{:016x}", lease.proof);
        JsonLease { start: lease.start, end: lease.end, proof }
    }
}

/// An id in a JSON answer: a number, or a string for a tag with a text template.
#[derive(Deserialize)]
#[serde(untagged)]
enum JsonId {
    Number(u64),
    Text(String),
}

/// Leases as a server sent them, if they are valid ids, increasing, disjoint and no more
/// than asked for.
fn checked_leases(leases: Vec<WireLease>, count: u64) -> Result<Vec<WireLease>, Failure> {
    let valid = |l: &WireLease| ID_MIN <= l.start && l.start < l.end && l.end - 1 <= ID_MAX;
    let increasing = leases.windows(2).all(|w| w[0].end <= w[1].start);
    let total: u64 = leases.iter().map(|l| l.end.saturating_sub(l.start)).sum();
    if leases.is_empty() || !leases.iter().all(valid) || !increasing || total > count {
        return Err(Failure::down(format!(
            "malformed ranges for {count} ids: {:?}",
            leases.iter().take(4).map(|l| (l.start, l.end)).collect::<Vec<_>>()
        )));
    }
    Ok(leases)
}

fn checked_ids(ids: Vec<u64>, texts: Vec<String>, count: u64) -> Result<PublicIds, Failure> {
    let answer = if texts.is_empty() {
        PublicIds::Numbers(ids)
    } else if ids.is_empty() {
        PublicIds::Texts(texts)
    } else {
        return Err(Failure::down("answered both numbers and texts"));
    };
    if answer.len() as u64 != count {
        return Err(Failure::down(format!("answered {} ids for {count}", answer.len())));
    }
    Ok(answer)
}

fn checked_numbers(ids: Vec<u64>, count: u64) -> Result<Vec<u64>, Failure> {
    if ids.len() as u64 != count {
        return Err(Failure::down(format!("answered {} ids for {count}", ids.len())));
    }
    Ok(ids)
}

fn checked_json_ids(ids: Vec<JsonId>, count: u64) -> Result<PublicIds, Failure> {
    let mut numbers = Vec::new();
    let mut texts = Vec::new();
    for id in ids {
        match id {
            JsonId::Number(n) => numbers.push(n),
            JsonId::Text(t) => texts.push(t),
        }
    }
    checked_ids(numbers, texts, count)
}

fn with_token(request: reqwest::RequestBuilder, http: Http<'_>) -> reqwest::RequestBuilder {
    match http.token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
}

async fn get<T: DeserializeOwned>(http: Http<'_>, path: &str, subject: &str) -> Result<T, Failure> {
    let request = with_token(http.client.get(format!("{}{path}", http.base)), http);
    answer(request, subject).await
}

async fn post<B: Serialize, T: DeserializeOwned>(
    http: Http<'_>,
    path: &str,
    body: &B,
    subject: &str,
) -> Result<T, Failure> {
    let request = with_token(http.client.post(format!("{}{path}", http.base)), http).json(body);
    answer(request, subject).await
}

async fn answer<T: DeserializeOwned>(
    request: reqwest::RequestBuilder,
    subject: &str,
) -> Result<T, Failure> {
    Ok(answer_with_headers(request, subject).await?.0)
}

/// [`answer`] with the answer's headers.
async fn answer_with_headers<T: DeserializeOwned>(
    request: reqwest::RequestBuilder,
    subject: &str,
) -> Result<(T, reqwest::header::HeaderMap), Failure> {
    let response =
        request.send().await.map_err(|e| Failure::down(format!("HTTP request failed: {e}")))?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let body =
        response.bytes().await.map_err(|e| Failure::down(format!("HTTP answer cut off: {e}")))?;
    if !(200..300).contains(&status) {
        return Err(from_http(status, &body, subject));
    }
    let answer = serde_json::from_slice(&body)
        .map_err(|e| Failure::down(format!("malformed HTTP answer: {e}")))?;
    Ok((answer, headers))
}
