//! Cluster mode's control plane (issue 46, ADR 38) against a real etcd (scripts/etcd-server.sh):
//! Weir processes on 127.0.0.1 join one cluster, elect a coordinator and share the vnodes; kill
//! -9 of a worker and of the coordinator, a process stopped past its lease (fenced, then
//! joining again), a node added and one stopped cleanly, and etcd restarted, each followed by
//! every live node showing the same whole, balanced assignment.
//!
//! One scenario in order (not tests side by side): they share one etcd, which the scenario
//! restarts.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{assert_sqlstate, TestServer};

/// The etcd the tests use: `$WEIR_TEST_ETCD`, or the one scripts/etcd-server.sh starts.
fn etcd() -> String {
    std::env::var("WEIR_TEST_ETCD").unwrap_or_else(|_| script("start"))
}

fn script(what: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/etcd-server.sh");
    let out = Command::new(path).arg(what).output().expect("scripts/etcd-server.sh");
    assert!(out.status.success(), "etcd-server.sh {what}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn node(cluster: &str, id: &str) -> TestServer {
    // Port 0: each node's exchange service on a free port, advertised once bound.
    TestServer::start_with(&[
        "--cluster",
        cluster,
        "--node-id",
        id,
        "--cluster-lease",
        "2s",
        "--exchange-listen",
        "127.0.0.1:0",
    ])
}

/// Each node's advertised exchange address, from `weir_catalog.cluster_nodes`.
async fn exchange_addresses(server: &TestServer) -> BTreeMap<String, String> {
    let client = server.connect().await;
    let rows = client.simple_query("SELECT node_id, exchange FROM weir_catalog.cluster_nodes").await.unwrap();
    rows.into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some((r.get(0)?.to_string(), r.get(1)?.to_string())),
            _ => None,
        })
        .collect()
}

/// What the exchange service at `address` answers a stream for node `to` of the cluster
/// `cluster_name` that no job expects.
async fn exchange_answer(cluster_name: &str, address: &str, to: &str) -> String {
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    let header = weir::exchange::StreamHeader {
        version: weir::exchange::frame::PROTOCOL_VERSION,
        cluster: format!("/weir/{cluster_name}/"),
        exchange: "no-such-view/0".into(),
        from_node: "test".into(),
        to_node: to.into(),
        generation: 1,
    };
    let schema = Schema::new(vec![Field::new("k", DataType::Int64, false)]);
    let channel = weir::exchange::outbound::channel(address).unwrap();
    match weir::exchange::Outbound::open(channel, header, &schema, Duration::ZERO).await {
        Ok(_) => "accepted".into(),
        Err(e) => e.to_string(),
    }
}

/// One row of `weir_catalog.cluster_nodes`.
#[derive(Debug, Clone, PartialEq)]
struct Row {
    role: String,
    state: String,
    vnodes: u32,
    ranges: String,
}

async fn picture(server: &TestServer) -> BTreeMap<String, Row> {
    let client = server.connect().await;
    let rows = client
        .simple_query("SELECT node_id, role, state, vnodes, vnode_ranges FROM weir_catalog.cluster_nodes")
        .await
        .expect("cluster_nodes");
    rows.into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some((
                r.get(0).unwrap().to_string(),
                Row {
                    role: r.get(1).unwrap().into(),
                    state: r.get(2).unwrap().into(),
                    vnodes: r.get(3).unwrap().parse().unwrap(),
                    ranges: r.get(4).unwrap().into(),
                },
            )),
            _ => None,
        })
        .collect()
}

/// Whether `p` is exactly the nodes `ids`, all up, one coordinator, every vnode owned once,
/// shares within one of each other.
fn settled(p: &BTreeMap<String, Row>, ids: &[&str]) -> bool {
    let names: Vec<&str> = p.keys().map(String::as_str).collect();
    if names != ids || p.values().any(|r| r.state != "up") {
        return false;
    }
    if p.values().filter(|r| r.role == "coordinator").count() != 1 {
        return false;
    }
    let mut owned = [0u8; 256];
    for row in p.values() {
        for range in row.ranges.split(',').filter(|s| !s.is_empty()) {
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            for v in a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap() {
                owned[v] += 1;
            }
        }
    }
    let counts: Vec<u32> = p.values().map(|r| r.vnodes).collect();
    owned.iter().all(|o| *o == 1) && counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1
}

/// Waits until every server in `servers` shows the same settled picture of `ids`; how long it
/// took. Fails after 30 s with what each showed.
async fn wait_settled(servers: &[&TestServer], ids: &[&str]) -> (Duration, BTreeMap<String, Row>) {
    let started = Instant::now();
    loop {
        let mut pictures = Vec::new();
        for s in servers {
            pictures.push(picture(s).await);
        }
        if pictures.iter().all(|p| settled(p, ids) && *p == pictures[0]) {
            return (started.elapsed(), pictures.swap_remove(0));
        }
        assert!(started.elapsed() < Duration::from_secs(30), "not settled on {ids:?} after 30 s: {pictures:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn events(server: &TestServer, kind: &str, node: &str) -> usize {
    let client = server.connect().await;
    let sql = format!("SELECT count(*) FROM weir_catalog.cluster_events WHERE kind = '{kind}' AND node_id = '{node}'");
    let rows = common::rows(&client, &sql).await;
    rows[0].parse().unwrap()
}

fn coordinator(p: &BTreeMap<String, Row>) -> String {
    p.iter().find(|(_, r)| r.role == "coordinator").map(|(n, _)| n.clone()).unwrap()
}

fn signal(server: &TestServer, sig: &str) {
    Command::new("kill").arg(format!("-{sig}")).arg(server.pid().to_string()).status().expect("kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_share_the_vnodes_through_kills_fences_joins_leaves_and_an_etcd_restart() {
    let name = format!("test-{}-{}", std::process::id(), Instant::now().elapsed().as_nanos());
    let cluster = format!("etcd://{}/{name}", etcd());
    let mut servers: BTreeMap<&str, TestServer> =
        ["n1", "n2", "n3"].into_iter().map(|id| (id, node(&cluster, id))).collect();
    let (_, p) = wait_settled(&servers.values().collect::<Vec<_>>(), &["n1", "n2", "n3"]).await;
    println!("three nodes: {p:?}");

    // Every node advertises its own exchange service, and it answers there: it names the node
    // a stream is for, and it takes streams only into inboxes its jobs registered.
    let addresses = exchange_addresses(&servers["n2"]).await;
    assert_eq!(addresses, exchange_addresses(&servers["n1"]).await, "every node sees the same addresses");
    for id in ["n1", "n2", "n3"] {
        let address = &addresses[id];
        assert!(address.starts_with("127.0.0.1:") && !address.ends_with(":0"), "{id}: {address}");
        let answer = exchange_answer(&name, address, id).await;
        assert!(answer.contains("no job here expects"), "{id}: {answer}");
        let answer = exchange_answer(&name, address, "elsewhere").await;
        assert!(answer.contains(&format!("this is node {id}")), "{id}: {answer}");
    }

    // A node of a cluster refuses what it cannot yet share, and says why.
    let client = servers["n1"].connect().await;
    assert_sqlstate(&client, "CREATE TABLE t (id INT PRIMARY KEY)", "0A000").await;
    assert_sqlstate(&client, "CREATE ROLE reader LOGIN", "0A000").await;
    for id in ["n1", "n2", "n3"] {
        assert_eq!(events(&servers["n1"], "joined", id).await, 1, "{id}");
    }

    // kill -9 of a worker: its vnodes go to the two left within the lease and a little more.
    let worker = p.iter().find(|(_, r)| r.role == "worker").map(|(n, _)| n.clone()).unwrap();
    servers.get_mut(worker.as_str()).unwrap().kill();
    servers.remove(worker.as_str());
    let ids: Vec<&str> = servers.keys().copied().collect();
    let (took, p) = wait_settled(&servers.values().collect::<Vec<_>>(), &ids).await;
    println!("worker {worker} killed: settled in {took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(p.values().all(|r| r.vnodes == 128), "{p:?}");
    assert!(events(servers.values().next().unwrap(), "left", &worker).await >= 1);

    // kill -9 of the coordinator: the last node is elected and holds every vnode.
    let elected = coordinator(&p);
    servers.get_mut(elected.as_str()).unwrap().kill();
    servers.remove(elected.as_str());
    let last = *servers.keys().next().unwrap();
    let (took, p) = wait_settled(&servers.values().collect::<Vec<_>>(), &[last]).await;
    println!("coordinator {elected} killed: settled in {took:?}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!((p[last].role.as_str(), p[last].vnodes), ("coordinator", 256));

    // Two nodes join the survivor.
    let joiners: Vec<&str> = ["n1", "n2", "n3"].into_iter().filter(|n| *n != last).collect();
    for id in &joiners {
        servers.insert(id, node(&cluster, id));
    }
    wait_settled(&servers.values().collect::<Vec<_>>(), &["n1", "n2", "n3"]).await;

    // SIGSTOP past the lease: the others give its vnodes away; on SIGCONT it finds itself
    // fenced (its lease ended), records it, and joins again under a new lease.
    let stopped = joiners[0];
    signal(&servers[stopped], "STOP");
    let others: Vec<&TestServer> = servers.iter().filter(|(n, _)| **n != stopped).map(|(_, s)| s).collect();
    let other_ids: Vec<&str> = servers.keys().copied().filter(|n| *n != stopped).collect();
    wait_settled(&others, &other_ids).await;
    signal(&servers[stopped], "CONT");
    let (_, p) = wait_settled(&servers.values().collect::<Vec<_>>(), &["n1", "n2", "n3"]).await;
    assert!(events(&servers[stopped], "fenced", stopped).await >= 1, "{p:?}");
    let metrics = servers[stopped].metrics_text();
    assert!(metrics.contains("weir_cluster_fenced_total 1"), "{metrics}");

    // A fourth node takes a quarter; stopped cleanly, it gives it back without waiting for
    // its lease.
    servers.insert("n4", node(&cluster, "n4"));
    let (_, p) = wait_settled(&servers.values().collect::<Vec<_>>(), &["n1", "n2", "n3", "n4"]).await;
    assert!(p.values().all(|r| r.vnodes == 64), "{p:?}");
    let mut n4 = servers.remove("n4").unwrap();
    let left_at = Instant::now();
    n4.stop();
    wait_settled(&servers.values().collect::<Vec<_>>(), &["n1", "n2", "n3"]).await;
    println!("n4 stopped cleanly: settled {:?} after the stop began", left_at.elapsed());
    assert!(events(&servers["n1"], "left", "n4").await >= 1);

    // etcd restarted under the cluster: the nodes carry on (or fence and join again) and
    // settle on the same three.
    script("restart");
    tokio::time::sleep(Duration::from_secs(1)).await;
    wait_settled(&servers.values().collect::<Vec<_>>(), &["n1", "n2", "n3"]).await;
}

#[test]
fn cluster_flags_are_checked_before_the_server_starts() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_weir")).args(args).output().expect("weir");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run(&["--cluster", "etcd://127.0.0.1:1"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--node-id"), "{err}");
    let (code, err) = run(&["--cluster", "http://127.0.0.1:2379", "--node-id", "a"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("etcd://"), "{err}");
    let (code, err) = run(&["--cluster", "etcd://127.0.0.1:2379", "--node-id", "a", "--listen", "0.0.0.0:0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--advertise"), "{err}");
    let (code, err) = run(&[
        "--cluster",
        "etcd://127.0.0.1:2379",
        "--node-id",
        "a",
        "--listen",
        "127.0.0.1:4566",
        "--exchange-listen",
        "127.0.0.1:4566",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--exchange-listen"), "{err}");
    let (code, err) = run(&["--cluster", "etcd://127.0.0.1:2379", "--node-id", "a", "--cluster-lease", "1500ms"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("at least 2"), "{err}");
}

#[tokio::test]
async fn a_single_process_is_one_standalone_node_with_every_vnode() {
    let server = TestServer::start();
    let client = server.connect().await;
    let rows = common::rows(
        &client,
        "SELECT node_id, role, state, vnodes, vnode_ranges, this_node FROM weir_catalog.cluster_nodes",
    )
    .await;
    assert_eq!(rows, vec!["local|standalone|up|256|0-255|t"]);
    assert_eq!(common::rows(&client, "SELECT count(*) FROM weir_catalog.cluster_events").await, vec!["0"]);
    // And refuses nothing for being one.
    client.batch_execute("CREATE TABLE t (id INT PRIMARY KEY); INSERT INTO t VALUES (1)").await.unwrap();
}

#[tokio::test]
async fn a_data_directory_with_relations_does_not_join_a_cluster() {
    let mut server = TestServer::start();
    server.connect().await.batch_execute("CREATE TABLE t (id INT PRIMARY KEY)").await.unwrap();
    server.stop();
    let out = Command::new(env!("CARGO_BIN_EXE_weir"))
        .args(["--listen", &format!("127.0.0.1:{}", common::free_port()), "--metrics-listen", "off"])
        .arg("--data-dir")
        .arg(server.data_dir())
        .args(["--cluster", "etcd://127.0.0.1:1", "--node-id", "a"])
        .output()
        .expect("weir");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("cannot join a cluster"), "{said}");
}
