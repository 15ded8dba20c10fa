//! A TCP forwarder on loopback whose line can be cut: a test points a server at it instead of
//! at a real service (the S3 test server), then cuts it to make the service unreachable and
//! mends it again. Cut, it drops every open connection and closes each new one at once, as a
//! network partition seen from the client would (requests fail, then retries fail).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};

pub struct CutLine {
    pub port: u16,
    cut: Arc<AtomicBool>,
    /// Bumped at each cut: connections opened before it end.
    generation: Arc<AtomicU64>,
}

impl CutLine {
    /// Forwards 127.0.0.1:<port> to `target` (host:port) until the runtime ends.
    pub async fn to(target: &str) -> CutLine {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cut = Arc::new(AtomicBool::new(false));
        let generation = Arc::new(AtomicU64::new(0));
        let (c, g, target) = (Arc::clone(&cut), Arc::clone(&generation), target.to_string());
        tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { continue };
                if c.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let (g, target, born) = (Arc::clone(&g), target.clone(), g.load(Ordering::SeqCst));
                tokio::spawn(async move {
                    let Ok(mut upstream) = TcpStream::connect(&target).await else { return };
                    let copy = tokio::io::copy_bidirectional(&mut client, &mut upstream);
                    let watch = async {
                        while g.load(Ordering::SeqCst) == born {
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        }
                    };
                    tokio::select! { _ = copy => {}, _ = watch => {} }
                });
            }
        });
        CutLine { port, cut, generation }
    }

    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    pub fn mend(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}
