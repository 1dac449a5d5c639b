//! A small HTTP/1.1 server on 127.0.0.1 over a local directory, for the
//! remote-table tests: `GET` with `Range` (206 and `Content-Range`),
//! `HEAD`, and WebDAV `PROPFIND` listings (depth 0, 1 and infinity), with
//! `ETag` and `Last-Modified`. It counts every request, so tests can assert
//! what a read cost, and can fail chosen requests.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

/// One request the server saw: method, path and `Range` header.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub range: Option<String>,
}

/// What to do with a request: serve it, or answer with this status.
pub type Rule = dyn Fn(usize, &Seen) -> Option<u16> + Send + Sync;

pub struct HttpServer {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

impl HttpServer {
    /// Serves `root` until dropped.
    pub fn start(root: &Path) -> HttpServer {
        HttpServer::with_rule(root, Arc::new(|_, _| None))
    }

    /// Serves `root`, answering a request with the status `rule` picks.
    pub fn with_rule(root: &Path, rule: Arc<Rule>) -> HttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (root, s, st) = (root.to_path_buf(), seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (root, seen, rule) = (root.clone(), s.clone(), rule.clone());
                std::thread::spawn(move || serve(conn, &root, &seen, &*rule));
            }
        });
        HttpServer { url, seen, stop }
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn count(&self, method: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.method == method)
            .count()
    }

    pub fn reset(&self) {
        self.seen.lock().unwrap().clear();
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.url.trim_start_matches("http://"));
    }
}

fn etag(meta: &std::fs::Metadata) -> String {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|m| m.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("\"{:x}-{:x}\"", meta.len(), mtime)
}

fn http_date() -> &'static str {
    "Thu, 03 Dec 2026 00:00:00 GMT"
}

fn respond(
    out: &mut TcpStream,
    status: u16,
    reason: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    // One write: a header and a body sent apart would wait for the
    // client's delayed ACK (Nagle).
    let mut all = head.into_bytes();
    all.extend_from_slice(body);
    out.write_all(&all)
}

fn serve(conn: TcpStream, root: &Path, seen: &Mutex<Vec<Seen>>, rule: &Rule) {
    let _ = conn.set_nodelay(true);
    let mut out = conn.try_clone().unwrap();
    let mut reader = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
            return;
        };
        let (method, target) = (method.to_owned(), target.to_owned());
        let mut range = None;
        let mut depth = "1".to_owned();
        let mut body_len = 0usize;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "range" => range = Some(v.trim().to_owned()),
                    "depth" => depth = v.trim().to_owned(),
                    "content-length" => body_len = v.trim().parse().unwrap_or(0),
                    _ => {}
                }
            }
        }
        let mut body = vec![0u8; body_len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let request = Seen {
            method: method.clone(),
            path: target.clone(),
            range: range.clone(),
        };
        let n = {
            let mut s = seen.lock().unwrap();
            s.push(request.clone());
            s.len() - 1
        };
        if let Some(status) = rule(n, &request) {
            if respond(&mut out, status, "Injected", &[], b"").is_err() {
                return;
            }
            continue;
        }
        let rel = target
            .split('?')
            .next()
            .unwrap_or("")
            .trim_start_matches('/');
        let path: PathBuf = root.join(rel);
        let ok = match method.as_str() {
            "GET" | "HEAD" => get(&mut out, &path, range.as_deref(), method == "HEAD"),
            "PROPFIND" => propfind(&mut out, root, &path, &depth),
            _ => respond(&mut out, 405, "Method Not Allowed", &[], b""),
        };
        if ok.is_err() {
            return;
        }
    }
}

fn get(out: &mut TcpStream, path: &Path, range: Option<&str>, head: bool) -> std::io::Result<()> {
    let Some(meta) = std::fs::metadata(path).ok().filter(|m| m.is_file()) else {
        return respond(out, 404, "Not Found", &[], b"");
    };
    let size = meta.len();
    let (mut start, mut end, mut status) = (0u64, size, 200u16);
    if let Some(r) = range.and_then(|r| r.strip_prefix("bytes=")) {
        let (a, b) = r.split_once('-').unwrap_or((r, ""));
        start = a.parse().unwrap_or(0);
        end = b.parse::<u64>().map_or(size, |b| (b + 1).min(size));
        if start >= size {
            return respond(
                out,
                416,
                "Range Not Satisfiable",
                &[("Content-Range".into(), format!("bytes */{size}"))],
                b"",
            );
        }
        status = 206;
    }
    let data = std::fs::read(path)?;
    let mut headers = vec![
        ("ETag".to_owned(), etag(&meta)),
        ("Last-Modified".to_owned(), http_date().to_owned()),
    ];
    if status == 206 {
        headers.push((
            "Content-Range".into(),
            format!("bytes {start}-{}/{size}", end - 1),
        ));
    }
    let body = &data[start as usize..end as usize];
    if head {
        let mut h = format!("HTTP/1.1 {status} OK\r\nContent-Length: {}\r\n", body.len());
        for (k, v) in &headers {
            h.push_str(&format!("{k}: {v}\r\n"));
        }
        h.push_str("\r\n");
        return out.write_all(h.as_bytes());
    }
    respond(
        out,
        status,
        if status == 206 {
            "Partial Content"
        } else {
            "OK"
        },
        &headers,
        body,
    )
}

fn propfind(out: &mut TcpStream, root: &Path, path: &Path, depth: &str) -> std::io::Result<()> {
    if !path.exists() {
        return respond(out, 404, "Not Found", &[], b"");
    }
    let mut entries = vec![path.to_path_buf()];
    if path.is_dir() && depth != "0" {
        let mut stack = vec![path.to_path_buf()];
        while let Some(d) = stack.pop() {
            let mut names: Vec<PathBuf> = std::fs::read_dir(&d)?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .collect();
            names.sort();
            for p in names {
                if p.is_dir() && depth == "infinity" {
                    stack.push(p.clone());
                }
                entries.push(p);
            }
        }
    }
    let mut xml = String::from("<?xml version=\"1.0\"?><D:multistatus xmlns:D=\"DAV:\">");
    for e in entries {
        let rel = e
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let meta = std::fs::metadata(&e)?;
        let (href, prop) = if meta.is_dir() {
            (
                format!("/{rel}/").replace("//", "/"),
                format!("<D:resourcetype><D:collection/></D:resourcetype><D:getlastmodified>{}</D:getlastmodified>", http_date()),
            )
        } else {
            (
                format!("/{rel}"),
                format!(
                    "<D:resourcetype/><D:getcontentlength>{}</D:getcontentlength><D:getlastmodified>{}</D:getlastmodified><D:getetag>{}</D:getetag>",
                    meta.len(),
                    http_date(),
                    etag(&meta)
                ),
            )
        };
        xml.push_str(&format!(
            "<D:response><D:href>{href}</D:href><D:propstat><D:prop>{prop}</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>"
        ));
    }
    xml.push_str("</D:multistatus>");
    respond(
        out,
        207,
        "Multi-Status",
        &[("Content-Type".into(), "application/xml".into())],
        xml.as_bytes(),
    )
}
