//! A DNS server of the test's own, in process: UDP on loopback, answering A and AAAA queries
//! from a table the test sets (`NXDOMAIN` for a name it does not hold), with TTL 0 so nothing is
//! cached between a test's changes. Messages are read and written with `hickory-proto`, the
//! monitor's resolver's own crate.

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA};
use hickory_proto::rr::{RData, Record, RecordType};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use tokio::net::UdpSocket;
use tokio::task::JoinHandle;

type Table = Arc<Mutex<HashMap<String, Vec<IpAddr>>>>;

pub struct DnsServer {
    /// Where it listens (`127.0.0.1:<port>`), as `CAPSTAN__MONITOR__RESOLVER` takes it.
    pub address: SocketAddr,
    records: Table,
    /// Every name asked, lower case, in order.
    asked: Arc<Mutex<Vec<String>>>,
    task: JoinHandle<()>,
}

impl DnsServer {
    pub async fn start() -> DnsServer {
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let address = socket.local_addr().unwrap();
        let records: Table = Arc::default();
        let asked: Arc<Mutex<Vec<String>>> = Arc::default();
        let task = tokio::spawn(serve(socket, records.clone(), asked.clone()));
        DnsServer {
            address,
            records,
            asked,
            task,
        }
    }

    /// `name` resolves to `addresses` from now on (none: it does not resolve).
    pub fn set(&self, name: &str, addresses: &[IpAddr]) {
        let mut records = self.records.lock().unwrap();
        if addresses.is_empty() {
            records.remove(&name.to_ascii_lowercase());
        } else {
            records.insert(name.to_ascii_lowercase(), addresses.to_vec());
        }
    }

    /// Every name asked so far.
    pub fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(socket: UdpSocket, records: Table, asked: Arc<Mutex<Vec<String>>>) {
    let mut buffer = vec![0u8; 4096];
    loop {
        let Ok((length, peer)) = socket.recv_from(&mut buffer).await else {
            return;
        };
        let Ok(request) = Message::from_vec(&buffer[..length]) else {
            continue;
        };
        let mut response = Message::new();
        response
            .set_id(request.id())
            .set_message_type(MessageType::Response)
            .set_op_code(OpCode::Query)
            .set_recursion_desired(request.recursion_desired())
            .set_recursion_available(true)
            .set_authoritative(true);
        for query in request.queries() {
            response.add_query(query.clone());
        }
        if let Some(query) = request.queries().first() {
            let name = query
                .name()
                .to_ascii()
                .trim_end_matches('.')
                .to_ascii_lowercase();
            asked.lock().unwrap().push(name.clone());
            let found = records.lock().unwrap().get(&name).cloned();
            match found {
                None => {
                    response.set_response_code(ResponseCode::NXDomain);
                }
                Some(addresses) => {
                    for address in addresses {
                        let rdata = match (address, query.query_type()) {
                            (IpAddr::V4(v4), RecordType::A) => RData::A(A(v4)),
                            (IpAddr::V6(v6), RecordType::AAAA) => RData::AAAA(AAAA(v6)),
                            _ => continue,
                        };
                        response.add_answer(Record::from_rdata(query.name().clone(), 0, rdata));
                    }
                }
            }
        }
        if let Ok(bytes) = response.to_vec() {
            let _ = socket.send_to(&bytes, peer).await;
        }
    }
}
