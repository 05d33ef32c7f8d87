//! The embedding endpoints, as llama-server answers them: OpenAI's
//! `POST /v1/embeddings` (vectors as floats or base64), llama-server's own
//! `POST /embedding` (every token's row with pooling none), and
//! `POST /v1/rerank` (Jina's shape, or TEI's with `texts`). A request's
//! inputs are tokenised here and computed together by the engine (as many
//! to a decode as the context takes). A server that was not started for
//! embeddings answers 501, as llama-server does.

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::Response;
use ggraph_model::arch::Pooling;
use ggraph_model::embedding::Normalize;
use ggraph_model::tokenizer::Tokenizer;
use serde_json::{Value, json};

use crate::Server;
use crate::engine::{Engine, Refused};
use crate::request::ApiError;
use crate::submit::{json_body, json_or_error, ready};

/// `POST /v1/embeddings`: OpenAI's list of vectors.
pub async fn embeddings_oai(
    State(server): State<Server>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    json_or_error(embeddings(&server, &body, true).await)
}

/// `POST /embedding`: llama-server's own answer, a list of each input's
/// rows (one pooled row, or every token's with pooling none).
pub async fn embeddings_native(
    State(server): State<Server>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    json_or_error(embeddings(&server, &body, false).await)
}

/// `POST /v1/rerank`: each document's relevance to the query.
pub async fn rerank(State(server): State<Server>, body: Result<Bytes, BytesRejection>) -> Response {
    json_or_error(rerank_answer(&server, &body).await)
}

/// The pooling of a server started for embeddings, or 501.
fn pooling_of(engine: &Engine) -> Result<Pooling, ApiError> {
    engine.embeddings.ok_or_else(|| ApiError {
        status: 501,
        message: "This server does not support embeddings. Start it with `--embeddings`".into(),
    })
}

async fn embeddings(
    server: &Server,
    body: &Result<Bytes, BytesRejection>,
    oai: bool,
) -> Result<Value, ApiError> {
    let r = ready(server)?;
    let pooling = pooling_of(&r.engine)?;
    if oai && pooling == Pooling::None {
        return Err(ApiError::bad(
            "Pooling type 'none' is not OAI compatible. Please use a different pooling type",
        ));
    }
    let b = json_body(body)?;
    let input = match (b.get("input"), b.get("content")) {
        (Some(i), _) => i,
        (None, Some(c)) => c,
        (None, None) => return Err(ApiError::bad("\"input\" or \"content\" must be provided")),
    };
    let base64 = match b.get("encoding_format") {
        None => false,
        Some(f) if f == "float" => false,
        Some(f) if f == "base64" => true,
        Some(_) => {
            return Err(ApiError::bad(
                "The format to return the embeddings in. Can be either float or base64",
            ));
        }
    };
    let normalize = match b.get("embd_normalize") {
        None => Normalize::PNorm(2),
        Some(v) => v
            .as_i64()
            .and_then(|n| i32::try_from(n).ok())
            .and_then(Normalize::from_number)
            .ok_or_else(|| ApiError::bad("\"embd_normalize\" must be -1, 0 or a positive p"))?,
    };
    let inputs = tokenized(input, &r.engine.tokenizer)?;
    check_lengths(&inputs, r.engine.n_embd_tokens)?;
    let rows = computed(&r.engine, inputs.clone(), normalize).await?;
    let n_tokens: usize = inputs.iter().map(Vec::len).sum();
    // each input's rows: its pooled vector, or one per token
    let per_input: Vec<Vec<Vec<f32>>> = match pooling {
        Pooling::None => {
            let mut rows = rows.into_iter();
            (inputs.iter())
                .map(|t| rows.by_ref().take(t.len()).collect())
                .collect()
        }
        _ => rows.into_iter().map(|v| vec![v]).collect(),
    };
    if !oai {
        let list: Vec<Value> = (per_input.iter().enumerate())
            .map(|(i, rows)| json!({"index": i, "embedding": rows}))
            .collect();
        return Ok(Value::Array(list));
    }
    let data: Vec<Value> = (per_input.into_iter().enumerate())
        .map(|(i, rows)| {
            // pooled: one row an input
            let v = rows.into_iter().next().unwrap_or_default();
            match base64 {
                true => json!({"embedding": base64_f32(&v), "index": i, "object": "embedding",
                               "encoding_format": "base64"}),
                false => json!({"embedding": v, "index": i, "object": "embedding"}),
            }
        })
        .collect();
    Ok(listed(server, &b, n_tokens, "data", data))
}

/// The answer's list under `key`, as llama-server wraps it: the model the
/// request named (or the server's), and the tokens read.
fn listed(server: &Server, request: &Value, n_tokens: usize, key: &str, list: Vec<Value>) -> Value {
    let model = request
        .get("model")
        .cloned()
        .unwrap_or_else(|| json!(server.inner.model_name));
    json!({
        "model": model,
        "object": "list",
        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        key: list,
    })
}

async fn rerank_answer(
    server: &Server,
    body: &Result<Bytes, BytesRejection>,
) -> Result<Value, ApiError> {
    let r = ready(server)?;
    if r.engine.embeddings != Some(Pooling::Rank) {
        return Err(ApiError {
            status: 501,
            message: "This server does not support reranking. Start it with `--reranking`".into(),
        });
    }
    let b = json_body(body)?;
    // TEI's shape names the documents `texts`, Jina's `documents`
    let tei = b.get("texts").is_some();
    let query = match b.get("query") {
        Some(Value::String(q)) => q.as_str(),
        Some(_) => return Err(ApiError::bad("\"query\" must be a string")),
        None => return Err(ApiError::bad("\"query\" must be provided")),
    };
    let documents: Vec<&str> = match b.get("documents").or_else(|| b.get("texts")) {
        Some(Value::Array(a)) if !a.is_empty() => a
            .iter()
            .map(|d| d.as_str())
            .collect::<Option<_>>()
            .ok_or_else(|| ApiError::bad("\"documents\" must be a non-empty string array"))?,
        _ => {
            return Err(ApiError::bad(
                "\"documents\" must be a non-empty string array",
            ));
        }
    };
    let top_n = match b.get("top_n") {
        None => documents.len(),
        Some(n) => n
            .as_u64()
            .ok_or_else(|| ApiError::bad("\"top_n\" must be a non-negative integer"))?
            as usize,
    };
    let t = &r.engine.tokenizer;
    let inputs = documents
        .iter()
        .map(|d| rerank_prompt(t, query, d))
        .collect::<Result<Vec<_>, _>>()?;
    check_lengths(&inputs, r.engine.n_embd_tokens)?;
    let scores = computed(&r.engine, inputs.clone(), Normalize::None).await?;
    let n_tokens: usize = inputs.iter().map(Vec::len).sum();
    let label = if tei { "score" } else { "relevance_score" };
    let return_text = tei && b.get("return_text").and_then(Value::as_bool) == Some(true);
    let mut results: Vec<(usize, f32)> = scores
        .iter()
        .enumerate()
        .map(|(i, v)| (i, v.first().copied().unwrap_or(0.0)))
        .collect();
    // highest first; equal scores keep the documents' order
    results.sort_by(|a, b| b.1.total_cmp(&a.1));
    results.truncate(top_n);
    let list: Vec<Value> = results
        .into_iter()
        .map(|(i, s)| match return_text {
            true => json!({"index": i, label: s, "text": documents[i]}),
            false => json!({"index": i, label: s}),
        })
        .collect();
    match tei {
        true => Ok(Value::Array(list)),
        false => Ok(listed(server, &b, n_tokens, "results", list)),
    }
}

/// A query and a document as one input, as llama-server joins them
/// without a rerank template: BOS, the query, EOS (or SEP where there is
/// no EOS) and SEP where the vocabulary adds them, the document, EOS.
fn rerank_prompt(t: &Tokenizer, query: &str, doc: &str) -> Result<Vec<i32>, ApiError> {
    let v = t.vocab();
    let encode = |s: &str| {
        t.encode(s, false, false)
            .map_err(|e| ApiError::bad(e.to_string()))
    };
    let eos = v.special.eos.or(v.special.sep);
    let mut out = Vec::new();
    if v.add_bos {
        out.extend(v.special.bos);
    }
    out.extend(encode(query)?);
    if v.add_eos {
        out.extend(eos);
    }
    if v.add_sep {
        out.extend(v.special.sep);
    }
    out.extend(encode(doc)?);
    if v.add_eos {
        out.extend(eos);
    }
    Ok(out)
}

/// The inputs of a request, as llama-server reads them: a string, a list
/// of token ids, or a list of those; strings tokenised with special
/// tokens added and parsed.
fn tokenized(input: &Value, t: &Tokenizer) -> Result<Vec<Vec<i32>>, ApiError> {
    let one = |v: &Value| -> Result<Vec<i32>, ApiError> {
        match v {
            Value::String(s) => t
                .encode(s, true, true)
                .map_err(|e| ApiError::bad(e.to_string())),
            Value::Array(ids) => ids
                .iter()
                .map(|x| {
                    x.as_i64()
                        .and_then(|i| i32::try_from(i).ok())
                        .filter(|&i| i >= 0 && (i as usize) < t.n_vocab())
                        .ok_or_else(|| {
                            ApiError::bad(format!(
                                "a token id in \"input\" is not one of the vocabulary's {} ({x})",
                                t.n_vocab()
                            ))
                        })
                })
                .collect(),
            _ => Err(ApiError::bad(
                "\"input\" must be a string, a list of token ids, or a list of those",
            )),
        }
    };
    let inputs = match input {
        Value::Array(a) if a.is_empty() || a.iter().any(|x| !x.is_number()) => {
            a.iter().map(one).collect::<Result<Vec<_>, _>>()?
        }
        other => vec![one(other)?],
    };
    if inputs.is_empty() {
        return Err(ApiError::bad("\"input\" must not be empty"));
    }
    if inputs.iter().any(Vec::is_empty) {
        return Err(ApiError::bad("Input content cannot be empty"));
    }
    Ok(inputs)
}

/// An input longer than one decode takes is the request's fault, named
/// with both sizes.
fn check_lengths(inputs: &[Vec<i32>], limit: usize) -> Result<(), ApiError> {
    match inputs.iter().position(|t| t.len() > limit) {
        Some(i) => Err(ApiError::bad(format!(
            "input {i} has {} tokens, more than the {limit} the server takes at once (its \
             batch size): shorten it, or start the server with a larger --batch and --ubatch",
            inputs[i].len()
        ))),
        None => Ok(()),
    }
}

/// The engine's vectors for `inputs`.
async fn computed(
    engine: &Engine,
    inputs: Vec<Vec<i32>>,
    normalize: Normalize,
) -> Result<Vec<Vec<f32>>, ApiError> {
    match engine.embed(inputs, normalize).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(ApiError {
            status: 500,
            message: e,
        }),
        Err(Refused::Busy) => Err(ApiError {
            status: 503,
            message: "the queue is full: try again".into(),
        }),
        Err(Refused::Stopped) => Err(ApiError {
            status: 500,
            message: "the engine has stopped".into(),
        }),
    }
}

/// The little-endian bytes of `v` in standard base64 with padding (what
/// OpenAI's `encoding_format: "base64"` returns).
fn base64_f32(v: &[f32]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for k in 0..4 {
            if k <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * k) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_is_the_standard_alphabet_with_padding() {
        // 1.0f32 is 00 00 80 3f
        assert_eq!(base64_f32(&[1.0]), "AACAPw==");
        assert_eq!(base64_f32(&[1.0, -2.0]), "AACAPwAAAMA=");
        assert_eq!(base64_f32(&[]), "");
        assert_eq!(base64_f32(&[0.0, 0.0, 0.0]), "AAAAAAAAAAAAAAAA");
    }
}
