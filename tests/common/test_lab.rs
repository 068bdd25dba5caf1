//! The two-namespace lab as the privileged tests use it: created or the test fails, its drop
//! rows recognised by device and namespace, removed (and checked gone) at the end.

use std::time::{Duration, Instant};

use scanprof::analysis::DropRow;
use scanprof::netlab::{Lab, LabConfig, Side, TbfConfig, UdpSink};
use scanprof::system::netstat::QdiscStats;

use super::{assert_namespaces_gone, netns_inode};

/// A lab of a test and the names to check for afterwards.
pub struct TestLab {
    pub lab: Lab,
    pub names: Vec<String>,
    /// network namespace inodes, as drop rows name them
    pub sender_netns: u32,
    pub target_netns: u32,
}

impl TestLab {
    pub fn new(tbf: Option<TbfConfig>) -> TestLab {
        let lab = Lab::create(&LabConfig { tbf })
            .unwrap_or_else(|e| panic!("cannot create the namespace lab: {e:#}"));
        let names = vec![lab.sender_ns.clone(), lab.target_ns.clone()];
        let (sender_netns, target_netns) = (netns_inode(&lab.sender_ns), netns_inode(&lab.target_ns));
        TestLab {
            lab,
            names,
            sender_netns,
            target_netns,
        }
    }

    pub fn sink(&self, port: u16) -> UdpSink {
        self.lab
            .udp_sink(port)
            .unwrap_or_else(|e| panic!("cannot start the lab receiver: {e:#}"))
    }

    /// [`TestLab::sink`] keeping every datagram's arrival time (`SinkReport::arrivals`).
    pub fn sink_keeping_arrivals(&self, port: u16) -> UdpSink {
        self.lab
            .udp_sink_keeping_arrivals(port)
            .unwrap_or_else(|e| panic!("cannot start the lab receiver: {e:#}"))
    }

    /// Whether a drop row is about this lab's veth on `side`: kfree_skb is global, and other
    /// labs on the machine (other tests, other users) use the same addresses.
    pub fn at(&self, side: Side, d: &DropRow) -> bool {
        let (dev, netns) = match side {
            Side::Sender => (&self.lab.sender_dev, self.sender_netns),
            Side::Target => (&self.lab.target_dev, self.target_netns),
        };
        d.device.as_deref() == Some(dev.as_str()) && d.netns == netns
    }

    /// Whether a drop row is in one of this lab's namespaces.
    pub fn inside(&self, d: &DropRow) -> bool {
        d.netns == self.sender_netns || d.netns == self.target_netns
    }

    pub fn to(&self, port: u16) -> String {
        format!("{}:{port}", self.lab.target_addr)
    }

    /// Deletes the lab and checks that none of its namespaces is left.
    pub fn destroy(self) {
        let names = self.names.clone();
        self.lab
            .destroy()
            .unwrap_or_else(|e| panic!("lab teardown failed: {e:#}"));
        assert_namespaces_gone(&names);
    }

    /// The root qdisc of the sender's veth, once its queue has drained (at most 2 s).
    pub fn drained_root_qdisc(&self) -> QdiscStats {
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let root = self
                .lab
                .sender_qdisc()
                .unwrap_or_else(|e| panic!("tc qdisc show failed: {e:#}"))
                .into_iter()
                .find(|q| q.parent.is_none())
                .expect("no root qdisc on the sender's veth");
            if root.qlen == 0 || Instant::now() > deadline {
                return root;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
