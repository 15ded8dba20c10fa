//! The Nexmark event generator: Person, Auction and Bid events as Arrow batches.
//!
//! It follows the reference generator (Apache Beam's `NexmarkGenerator`, which Flink, RisingWave
//! and Arroyo reproduce): of every 50 events 1 is a person, 3 are auctions and 46 are bids;
//! ids start at 1000; a bid goes to a *hot* auction (the latest multiple of 100) with
//! probability 1 - 1/`hot_auction_ratio`, else to one of the 100 auctions in flight; bidders
//! and sellers likewise among the 1,000 active people; prices are log-uniform between 1 and
//! 1,000,000 dollars (in cents); a few channels are hot.
//!
//! Event `n` is a pure function of (seed, n): each event has its own random stream, so any
//! range of events can be generated on its own (a restarted source resumes at its offset and
//! produces the same events) and generation could be split across threads. Event time is
//! `base_time + n / events_per_second_of_event_time`, minus up to `max_out_of_order` at random
//! (deterministic too).

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Builder, RecordBatch, StringBuilder, TimestampMillisecondBuilder};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::error::{Result, WeirError};

/// Which of the three Nexmark streams a source carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Person,
    Auction,
    Bid,
}

impl EventKind {
    pub fn parse(name: &str) -> Result<EventKind> {
        match name.to_ascii_lowercase().as_str() {
            "person" => Ok(EventKind::Person),
            "auction" => Ok(EventKind::Auction),
            "bid" => Ok(EventKind::Bid),
            other => Err(WeirError::new(
                crate::error::SqlState::INVALID_PARAMETER_VALUE,
                format!("nexmark.table.type must be person, auction or bid, not '{other}'"),
            )),
        }
    }
}

const PERSON_PROPORTION: u64 = 1;
const AUCTION_PROPORTION: u64 = 3;
const PROPORTION_DENOMINATOR: u64 = 50;
const FIRST_PERSON_ID: i64 = 1000;
const FIRST_AUCTION_ID: i64 = 1000;
const FIRST_CATEGORY_ID: i64 = 10;
const NUM_CATEGORIES: u64 = 5;
const NUM_ACTIVE_PEOPLE: u64 = 1000;
const NUM_IN_FLIGHT_AUCTIONS: u64 = 100;
const PERSON_ID_LEAD: u64 = 10;
const AUCTION_ID_LEAD: u64 = 10;
const HOT_RATIO_STRIDE: u64 = 100;

const FIRST_NAMES: [&str; 11] =
    ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah", "Deiter", "Walter"];
const LAST_NAMES: [&str; 9] = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones", "Noris"];
const US_STATES: [&str; 6] = ["AZ", "CA", "ID", "OR", "WA", "WY"];
const US_CITIES: [&str; 10] =
    ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend", "Redmond", "Seattle", "Kent", "Cheyenne"];
const HOT_CHANNELS: [&str; 4] = ["Google", "Facebook", "Baidu", "Apple"];
const HOT_URLS: [&str; 4] = [
    "https://www.nexmark.com/googl/item.htm?query=1",
    "https://www.nexmark.com/fb/item.htm?query=1",
    "https://www.nexmark.com/baidu/item.htm?query=1",
    "https://www.nexmark.com/apple/item.htm?query=1",
];

/// How events are generated.
#[derive(Debug, Clone)]
pub struct GeneratorConfig {
    pub seed: u64,
    /// Milliseconds since 1970 of event 0.
    pub base_time_ms: i64,
    /// Events per second of event time (all three kinds together).
    pub event_rate: u64,
    /// Event times are up to this many milliseconds earlier than their place in the stream.
    pub max_out_of_order_ms: u64,
    /// 1 in this many bids goes to a random auction in flight, the rest to the hot one.
    pub hot_auction_ratio: u64,
    pub hot_bidder_ratio: u64,
    pub hot_seller_ratio: u64,
}

impl Default for GeneratorConfig {
    fn default() -> Self {
        GeneratorConfig {
            seed: 0,
            base_time_ms: 1_767_225_600_000, // 2026-01-01 00:00:00 UTC
            event_rate: 10_000,
            max_out_of_order_ms: 0,
            hot_auction_ratio: 2,
            hot_bidder_ratio: 4,
            hot_seller_ratio: 4,
        }
    }
}

/// SplitMix64: a small, fast, well-mixed generator; one per event.
struct Rng(u64);

impl Rng {
    fn for_event(seed: u64, event: u64) -> Rng {
        Rng(seed ^ event.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        ((self.next() as u128 * n as u128) >> 64) as u64
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The kind of event number `n`.
pub fn kind_of(n: u64) -> EventKind {
    let offset = n % PROPORTION_DENOMINATOR;
    if offset < PERSON_PROPORTION {
        EventKind::Person
    } else if offset < PERSON_PROPORTION + AUCTION_PROPORTION {
        EventKind::Auction
    } else {
        EventKind::Bid
    }
}

/// Persons created up to event `n` (0-based id of the latest).
#[allow(clippy::unnecessary_min_or_max)] // general in the proportions, constant for 1 person in 50
fn last_base0_person_id(n: u64) -> u64 {
    let epoch = n / PROPORTION_DENOMINATOR;
    let offset = (n % PROPORTION_DENOMINATOR).min(PERSON_PROPORTION - 1);
    epoch * PERSON_PROPORTION + offset
}

/// Auctions created up to event `n` (0-based id of the latest).
fn last_base0_auction_id(n: u64) -> u64 {
    let mut epoch = n / PROPORTION_DENOMINATOR;
    let mut offset = n % PROPORTION_DENOMINATOR;
    if offset < PERSON_PROPORTION {
        if epoch == 0 {
            return 0;
        }
        epoch -= 1;
        offset = AUCTION_PROPORTION - 1;
    } else if offset >= PERSON_PROPORTION + AUCTION_PROPORTION {
        offset = AUCTION_PROPORTION - 1;
    } else {
        offset -= PERSON_PROPORTION;
    }
    epoch * AUCTION_PROPORTION + offset
}

fn next_base0_person_id(n: u64, rng: &mut Rng) -> u64 {
    let people = last_base0_person_id(n) + 1;
    let active = people.min(NUM_ACTIVE_PEOPLE);
    people - active + rng.below(active + PERSON_ID_LEAD)
}

fn next_base0_auction_id(n: u64, rng: &mut Rng) -> u64 {
    let max = last_base0_auction_id(n);
    let min = max.saturating_sub(NUM_IN_FLIGHT_AUCTIONS);
    min + rng.below(max - min + 1 + AUCTION_ID_LEAD)
}

/// The generator of one stream (one event kind) of a Nexmark event sequence.
pub struct Generator {
    pub kind: EventKind,
    config: GeneratorConfig,
    schema: SchemaRef,
}

impl Generator {
    pub fn new(kind: EventKind, config: GeneratorConfig) -> Generator {
        Generator { kind, schema: schema(kind), config }
    }

    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Event time of event `n`, milliseconds.
    fn time_ms(&self, n: u64, rng: &mut Rng) -> i64 {
        let on_time = self.config.base_time_ms + (n as i128 * 1000 / self.config.event_rate.max(1) as i128) as i64;
        let late = if self.config.max_out_of_order_ms > 0 { rng.below(self.config.max_out_of_order_ms + 1) } else { 0 };
        on_time - late as i64
    }

    /// The rows of this generator's kind among events `from..to`, as one batch.
    pub fn batch(&self, from: u64, to: u64) -> Result<RecordBatch> {
        let capacity = (to.saturating_sub(from)) as usize;
        let columns: Vec<ArrayRef> = match self.kind {
            EventKind::Bid => self.bids(from, to, capacity),
            EventKind::Auction => self.auctions(from, to, capacity / 16 + 1),
            EventKind::Person => self.persons(from, to, capacity / 50 + 1),
        };
        Ok(RecordBatch::try_new(Arc::clone(&self.schema), columns)?)
    }

    fn bids(&self, from: u64, to: u64, capacity: usize) -> Vec<ArrayRef> {
        let mut auction = Int64Builder::with_capacity(capacity);
        let mut bidder = Int64Builder::with_capacity(capacity);
        let mut price = Int64Builder::with_capacity(capacity);
        let mut channel = StringBuilder::with_capacity(capacity, capacity * 8);
        let mut url = StringBuilder::with_capacity(capacity, capacity * 48);
        let mut date_time = TimestampMillisecondBuilder::with_capacity(capacity);
        let mut extra = StringBuilder::with_capacity(capacity, capacity * 4);
        let mut text = String::with_capacity(128);
        for n in from..to {
            if kind_of(n) != EventKind::Bid {
                continue;
            }
            let mut rng = Rng::for_event(self.config.seed, n);
            let a = if rng.below(self.config.hot_auction_ratio.max(1)) > 0 {
                (last_base0_auction_id(n) / HOT_RATIO_STRIDE) * HOT_RATIO_STRIDE
            } else {
                next_base0_auction_id(n, &mut rng)
            };
            let b = if rng.below(self.config.hot_bidder_ratio.max(1)) > 0 {
                (last_base0_person_id(n) / HOT_RATIO_STRIDE) * HOT_RATIO_STRIDE + 1
            } else {
                next_base0_person_id(n, &mut rng)
            };
            auction.append_value(a as i64 + FIRST_AUCTION_ID);
            bidder.append_value(b as i64 + FIRST_PERSON_ID);
            price.append_value(next_price(&mut rng));
            let c = rng.below(100);
            if c < HOT_CHANNELS.len() as u64 * 10 {
                let hot = (c / 10) as usize;
                channel.append_value(HOT_CHANNELS[hot]);
                url.append_value(HOT_URLS[hot]);
            } else {
                use std::fmt::Write;
                let id = rng.below(10_000);
                text.clear();
                let _ = write!(text, "channel-{id}");
                channel.append_value(&text);
                text.clear();
                let _ = write!(text, "https://www.nexmark.com/{}/item.htm?query=1&channel_id={id}", id % 97);
                url.append_value(&text);
            }
            date_time.append_value(self.time_ms(n, &mut rng));
            extra.append_value("");
        }
        vec![
            Arc::new(auction.finish()),
            Arc::new(bidder.finish()),
            Arc::new(price.finish()),
            Arc::new(channel.finish()),
            Arc::new(url.finish()),
            Arc::new(date_time.finish()),
            Arc::new(extra.finish()),
        ]
    }

    fn auctions(&self, from: u64, to: u64, capacity: usize) -> Vec<ArrayRef> {
        use std::fmt::Write;
        let mut id = Int64Builder::with_capacity(capacity);
        let mut item_name = StringBuilder::with_capacity(capacity, capacity * 16);
        let mut description = StringBuilder::with_capacity(capacity, capacity * 32);
        let mut initial_bid = Int64Builder::with_capacity(capacity);
        let mut reserve = Int64Builder::with_capacity(capacity);
        let mut date_time = TimestampMillisecondBuilder::with_capacity(capacity);
        let mut expires = TimestampMillisecondBuilder::with_capacity(capacity);
        let mut seller = Int64Builder::with_capacity(capacity);
        let mut category = Int64Builder::with_capacity(capacity);
        let mut extra = StringBuilder::with_capacity(capacity, capacity);
        let mut text = String::with_capacity(64);
        for n in from..to {
            if kind_of(n) != EventKind::Auction {
                continue;
            }
            let mut rng = Rng::for_event(self.config.seed, n);
            let auction_id = last_base0_auction_id(n) as i64 + FIRST_AUCTION_ID;
            let s = if rng.below(self.config.hot_seller_ratio.max(1)) > 0 {
                (last_base0_person_id(n) / HOT_RATIO_STRIDE) * HOT_RATIO_STRIDE
            } else {
                next_base0_person_id(n, &mut rng)
            };
            let initial = next_price(&mut rng);
            let time = self.time_ms(n, &mut rng);
            id.append_value(auction_id);
            text.clear();
            let _ = write!(text, "item-{}", rng.below(100_000));
            item_name.append_value(&text);
            text.clear();
            let _ = write!(text, "description of auction {auction_id}");
            description.append_value(&text);
            initial_bid.append_value(initial);
            reserve.append_value(initial + next_price(&mut rng));
            date_time.append_value(time);
            // Auctions run for up to 20 s of event time per in-flight auction slot, as in Beam.
            expires.append_value(time + 1 + rng.below(20_000) as i64);
            seller.append_value(s as i64 + FIRST_PERSON_ID);
            category.append_value(FIRST_CATEGORY_ID + rng.below(NUM_CATEGORIES) as i64);
            extra.append_value("");
        }
        vec![
            Arc::new(id.finish()),
            Arc::new(item_name.finish()),
            Arc::new(description.finish()),
            Arc::new(initial_bid.finish()),
            Arc::new(reserve.finish()),
            Arc::new(date_time.finish()),
            Arc::new(expires.finish()),
            Arc::new(seller.finish()),
            Arc::new(category.finish()),
            Arc::new(extra.finish()),
        ]
    }

    fn persons(&self, from: u64, to: u64, capacity: usize) -> Vec<ArrayRef> {
        use std::fmt::Write;
        let mut id = Int64Builder::with_capacity(capacity);
        let mut name = StringBuilder::with_capacity(capacity, capacity * 16);
        let mut email = StringBuilder::with_capacity(capacity, capacity * 24);
        let mut credit_card = StringBuilder::with_capacity(capacity, capacity * 20);
        let mut city = StringBuilder::with_capacity(capacity, capacity * 10);
        let mut state = StringBuilder::with_capacity(capacity, capacity * 2);
        let mut date_time = TimestampMillisecondBuilder::with_capacity(capacity);
        let mut extra = StringBuilder::with_capacity(capacity, capacity);
        let mut text = String::with_capacity(64);
        for n in from..to {
            if kind_of(n) != EventKind::Person {
                continue;
            }
            let mut rng = Rng::for_event(self.config.seed, n);
            id.append_value(last_base0_person_id(n) as i64 + FIRST_PERSON_ID);
            let first = FIRST_NAMES[rng.below(FIRST_NAMES.len() as u64) as usize];
            let last = LAST_NAMES[rng.below(LAST_NAMES.len() as u64) as usize];
            text.clear();
            let _ = write!(text, "{first} {last}");
            name.append_value(&text);
            text.clear();
            let _ = write!(text, "{}@{}.com", first.to_lowercase(), last.to_lowercase());
            email.append_value(&text);
            text.clear();
            let _ = write!(
                text,
                "{:04} {:04} {:04} {:04}",
                rng.below(10_000),
                rng.below(10_000),
                rng.below(10_000),
                rng.below(10_000)
            );
            credit_card.append_value(&text);
            city.append_value(US_CITIES[rng.below(US_CITIES.len() as u64) as usize]);
            state.append_value(US_STATES[rng.below(US_STATES.len() as u64) as usize]);
            date_time.append_value(self.time_ms(n, &mut rng));
            extra.append_value("");
        }
        vec![
            Arc::new(id.finish()),
            Arc::new(name.finish()),
            Arc::new(email.finish()),
            Arc::new(credit_card.finish()),
            Arc::new(city.finish()),
            Arc::new(state.finish()),
            Arc::new(date_time.finish()),
            Arc::new(extra.finish()),
        ]
    }
}

/// Log-uniform between 1 and 1,000,000 dollars, in cents.
fn next_price(rng: &mut Rng) -> i64 {
    (10f64.powf(rng.unit() * 6.0) * 100.0).round() as i64
}

/// The columns of each stream (RisingWave's and Arroyo's names).
pub fn schema(kind: EventKind) -> SchemaRef {
    let ts = || DataType::Timestamp(TimeUnit::Millisecond, None);
    let fields = match kind {
        EventKind::Bid => vec![
            Field::new("auction", DataType::Int64, true),
            Field::new("bidder", DataType::Int64, true),
            Field::new("price", DataType::Int64, true),
            Field::new("channel", DataType::Utf8, true),
            Field::new("url", DataType::Utf8, true),
            Field::new("date_time", ts(), true),
            Field::new("extra", DataType::Utf8, true),
        ],
        EventKind::Auction => vec![
            Field::new("id", DataType::Int64, true),
            Field::new("item_name", DataType::Utf8, true),
            Field::new("description", DataType::Utf8, true),
            Field::new("initial_bid", DataType::Int64, true),
            Field::new("reserve", DataType::Int64, true),
            Field::new("date_time", ts(), true),
            Field::new("expires", ts(), true),
            Field::new("seller", DataType::Int64, true),
            Field::new("category", DataType::Int64, true),
            Field::new("extra", DataType::Utf8, true),
        ],
        EventKind::Person => vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
            Field::new("email_address", DataType::Utf8, true),
            Field::new("credit_card", DataType::Utf8, true),
            Field::new("city", DataType::Utf8, true),
            Field::new("state", DataType::Utf8, true),
            Field::new("date_time", ts(), true),
            Field::new("extra", DataType::Utf8, true),
        ],
    };
    Arc::new(Schema::new(fields))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::Int64Type;

    #[test]
    fn proportions_are_one_three_forty_six() {
        let config = GeneratorConfig::default();
        let count = |kind| Generator::new(kind, config.clone()).batch(0, 50_000).unwrap().num_rows();
        assert_eq!(count(EventKind::Person), 1_000);
        assert_eq!(count(EventKind::Auction), 3_000);
        assert_eq!(count(EventKind::Bid), 46_000);
    }

    #[test]
    fn the_same_seed_gives_the_same_events_in_any_chunking() {
        let g = Generator::new(EventKind::Bid, GeneratorConfig { seed: 7, ..Default::default() });
        let whole = g.batch(0, 10_000).unwrap();
        let parts = [g.batch(0, 3_333).unwrap(), g.batch(3_333, 10_000).unwrap()];
        let joined = datafusion::arrow::compute::concat_batches(g.schema(), &parts).unwrap();
        assert_eq!(whole, joined);
        let other = Generator::new(EventKind::Bid, GeneratorConfig { seed: 8, ..Default::default() });
        assert_ne!(whole, other.batch(0, 10_000).unwrap());
    }

    #[test]
    fn bids_favour_hot_auctions_and_reference_existing_ids() {
        let g = Generator::new(EventKind::Bid, GeneratorConfig::default());
        let bids = g.batch(0, 100_000).unwrap();
        let auctions = bids.column(0).as_primitive::<Int64Type>();
        let hot = auctions.values().iter().filter(|&&a| (a - FIRST_AUCTION_ID) % 100 == 0).count();
        // Half the bids go to the hot auction (ratio 2), a few more land on a multiple of 100.
        assert!(hot > bids.num_rows() * 45 / 100 && hot < bids.num_rows() * 60 / 100, "{hot}");
        let max_auction = last_base0_auction_id(100_000) as i64 + FIRST_AUCTION_ID + AUCTION_ID_LEAD as i64;
        assert!(auctions.values().iter().all(|&a| (FIRST_AUCTION_ID..=max_auction).contains(&a)));
        let prices = bids.column(2).as_primitive::<Int64Type>();
        assert!(prices.values().iter().all(|&p| (100..=100_000_000).contains(&p)));
    }

    #[test]
    fn event_time_advances_at_the_event_rate() {
        let config = GeneratorConfig { event_rate: 1_000, ..Default::default() };
        let g = Generator::new(EventKind::Person, config);
        let people = g.batch(0, 100_000).unwrap();
        let times = people.column(6).as_primitive::<datafusion::arrow::datatypes::TimestampMillisecondType>();
        let span = times.value(times.len() - 1) - times.value(0);
        // 100,000 events at 1,000 per second: about 100 s between the first and last person.
        assert!((99_000..=100_000).contains(&span), "{span}");
    }
}
