//! How PostgreSQL names the type of a column of an Arrow type: what `\d`, `information_schema`
//! and RowDescription-adjacent catalog queries show (`frontend::pg_catalog`), and the column
//! types a Postgres sink creates its table with (`connectors::postgres`). One mapping, so what
//! a client sees of a view is what a sink makes of it. And [`DeclaredType`]: what a column was
//! declared as where its Arrow type says less (`VARCHAR(20)` is stored as a string).

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::datatypes::DataType;

use crate::error::{Result, SqlState, WeirError};

/// The PostgreSQL name of `data_type`; None for types PostgreSQL has no equivalent of (structs,
/// maps, unions).
pub fn postgres_type_name(data_type: &DataType) -> Option<String> {
    names(data_type).map(|(sql, _)| sql)
}

/// The `pg_type.typname` of a value of `data_type` (`int8`, `float8`, `_int4` for an array):
/// what `information_schema.columns.udt_name` says.
pub fn type_name(data_type: &DataType) -> Option<String> {
    names(data_type).map(|(_, typname)| typname)
}

/// `data_type`'s PostgreSQL name (`double precision`) and `pg_type.typname` (`float8`).
fn names(data_type: &DataType) -> Option<(String, String)> {
    let (sql, typname) = match data_type {
        DataType::Boolean => ("boolean", "bool"),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => ("smallint", "int2"),
        DataType::Int32 | DataType::UInt16 => ("integer", "int4"),
        // UInt64 (row numbers, ranks) reaches clients cast to bigint, as Postgres types them.
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => ("bigint", "int8"),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => {
            return Some((format!("numeric({p},{s})"), "numeric".into()))
        }
        DataType::Float16 | DataType::Float32 => ("real", "float4"),
        DataType::Float64 => ("double precision", "float8"),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => ("text", "text"),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView | DataType::FixedSizeBinary(_) => {
            ("bytea", "bytea")
        }
        DataType::Date32 | DataType::Date64 => ("date", "date"),
        DataType::Time32(_) | DataType::Time64(_) => ("time without time zone", "time"),
        DataType::Timestamp(_, None) => ("timestamp without time zone", "timestamp"),
        DataType::Timestamp(_, Some(_)) => ("timestamp with time zone", "timestamptz"),
        DataType::Interval(_) | DataType::Duration(_) => ("interval", "interval"),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            let (sql, typname) = names(f.data_type())?;
            return Some((format!("{sql}[]"), format!("_{typname}")));
        }
        _ => return None,
    };
    Some((sql.to_string(), typname.to_string()))
}

/// The PostgreSQL name of a column's type: its declared type if it has one, else its Arrow
/// type's ([`postgres_type_name`]).
pub fn column_type_name(field: &datafusion::arrow::datatypes::Field) -> Option<String> {
    match DeclaredType::of(field) {
        Some(declared) => Some(declared.sql_name()),
        None => postgres_type_name(field.data_type()),
    }
}

/// A column's type as declared, where its Arrow type does not say it all: `VARCHAR(n)` and
/// `CHAR(n)` are stored as Arrow strings (text), `NUMERIC` without a precision as a decimal of
/// DataFusion's default precision. Clients see the declared type in RowDescription, `pg_attribute`
/// and `information_schema.columns`; values are checked against a declared length when stored.
///
/// Kept as field metadata of the relation's stored definition (`catalog::RelationDef::schema`),
/// not of the schema DataFusion plans with ([`DeclaredType::strip`]), except `json` and `jsonb`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeclaredType {
    /// `pg_type.oid`: varchar (1043), bpchar (1042) or numeric (1700).
    pub oid: u32,
    /// `pg_attribute.atttypmod`: the length plus 4, `(precision << 16 | scale) + 4`, or -1.
    pub typmod: i32,
}

const VARCHAR_OID: u32 = 1043;
const BPCHAR_OID: u32 = 1042;
const NUMERIC_OID: u32 = 1700;
const JSON_OID: u32 = 114;
const JSONB_OID: u32 = 3802;
/// Field metadata keys of a declared type.
const OID_KEY: &str = "weir.declared_type_oid";
const TYPMOD_KEY: &str = "weir.declared_typmod";

impl DeclaredType {
    /// The declared type of a column written `data_type`, when it says more than its Arrow type.
    pub fn from_sql(data_type: &datafusion::sql::sqlparser::ast::DataType) -> Option<DeclaredType> {
        use datafusion::sql::sqlparser::ast::{CharacterLength, DataType as Sql, ExactNumberInfo};
        let length = |l: &Option<CharacterLength>| match l {
            Some(CharacterLength::IntegerLength { length, .. }) => {
                i32::try_from(*length).ok().and_then(|n| n.checked_add(4))
            }
            _ => None,
        };
        Some(match data_type {
            Sql::Varchar(l) | Sql::CharacterVarying(l) | Sql::CharVarying(l) | Sql::Nvarchar(l) => {
                DeclaredType { oid: VARCHAR_OID, typmod: length(l).unwrap_or(-1) }
            }
            // `CHAR` alone is CHAR(1), as in Postgres.
            Sql::Char(l) | Sql::Character(l) => DeclaredType { oid: BPCHAR_OID, typmod: length(l).unwrap_or(5) },
            Sql::Numeric(info) | Sql::Decimal(info) | Sql::Dec(info) => {
                let typmod = match info {
                    ExactNumberInfo::None => -1,
                    ExactNumberInfo::Precision(p) => ((*p as i32) << 16) + 4,
                    ExactNumberInfo::PrecisionAndScale(p, s) => (((*p as i32) << 16) | (*s as i32 & 0xffff)) + 4,
                };
                DeclaredType { oid: NUMERIC_OID, typmod }
            }
            Sql::JSON => DeclaredType { oid: JSON_OID, typmod: -1 },
            Sql::JSONB => DeclaredType { oid: JSONB_OID, typmod: -1 },
            _ => return None,
        })
    }

    /// The declared type recorded on `field`, if any.
    pub fn of(field: &datafusion::arrow::datatypes::Field) -> Option<DeclaredType> {
        let metadata = field.metadata();
        Some(DeclaredType {
            oid: metadata.get(OID_KEY)?.parse().ok()?,
            typmod: metadata.get(TYPMOD_KEY)?.parse().ok()?,
        })
    }

    /// `field` with this declared type recorded.
    pub fn on(self, field: datafusion::arrow::datatypes::Field) -> datafusion::arrow::datatypes::Field {
        let mut metadata = field.metadata().clone();
        metadata.insert(OID_KEY.to_string(), self.oid.to_string());
        metadata.insert(TYPMOD_KEY.to_string(), self.typmod.to_string());
        field.with_metadata(metadata)
    }

    /// `schema` with the declared type `declared(index, field)` gives each column that has one.
    pub fn declare(
        schema: datafusion::arrow::datatypes::Schema,
        declared: impl Fn(usize, &datafusion::arrow::datatypes::Field) -> Option<DeclaredType>,
    ) -> datafusion::arrow::datatypes::Schema {
        let fields: Vec<datafusion::arrow::datatypes::Field> = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| match declared(i, f) {
                Some(d) => d.on(f.as_ref().clone()),
                None => f.as_ref().clone(),
            })
            .collect();
        datafusion::arrow::datatypes::Schema::new_with_metadata(fields, schema.metadata().clone())
    }

    /// `schema` without declared lengths and precisions: what queries are planned with. `json`
    /// and `jsonb` stay: they are what a text value *is*, which functions over it need
    /// (`jsonb_agg` embeds a `jsonb` value as JSON, a `text` value as a string), and JSON
    /// expressions (`'{}'::jsonb`, `v -> 'a'`) carry them in plans already.
    pub fn strip(schema: &datafusion::arrow::datatypes::Schema) -> datafusion::arrow::datatypes::Schema {
        let fields: Vec<datafusion::arrow::datatypes::Field> = schema
            .fields()
            .iter()
            .map(|f| {
                let mut f = f.as_ref().clone();
                if f.metadata().contains_key(OID_KEY) && !DeclaredType::of(&f).is_some_and(|d| d.is_json()) {
                    let mut metadata = f.metadata().clone();
                    metadata.remove(OID_KEY);
                    metadata.remove(TYPMOD_KEY);
                    f = f.with_metadata(metadata);
                }
                f
            })
            .collect();
        datafusion::arrow::datatypes::Schema::new_with_metadata(fields, schema.metadata().clone())
    }

    /// Whether a value of `data_type` can carry this declared type (a string a character type,
    /// a decimal numeric): an expression over a declared column may have changed its type.
    pub fn fits(self, data_type: &DataType) -> bool {
        match self.oid {
            NUMERIC_OID => matches!(data_type, DataType::Decimal128(_, _) | DataType::Decimal256(_, _)),
            _ => matches!(data_type, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View),
        }
    }

    /// Whether a decimal column `field` prints each value's own places rather than all of its
    /// scale: it is a `NUMERIC` declared without a scale, or an undeclared decimal of a scale
    /// of 10 or more. PostgreSQL keeps a scale per value; an Arrow decimal has one per column,
    /// and Weir's are DataFusion's 10 for an unconstrained `NUMERIC` (`x::numeric`, `sum` of
    /// such a column) and the 16 or 20 places of quotients and products
    /// (`frontend::numeric_arithmetic`): places the value does not have, not a declared scale.
    /// A column declared `NUMERIC(p, s)`, and what keeps its scale, prints all `s` places.
    pub fn prints_own_scale(field: &datafusion::arrow::datatypes::Field) -> bool {
        match (DeclaredType::of(field), field.data_type()) {
            (Some(declared), _) => declared.oid == NUMERIC_OID && declared.typmod == -1,
            (None, DataType::Decimal128(_, scale)) => *scale >= 10,
            _ => false,
        }
    }

    /// The longest value a character type takes, in characters.
    pub fn max_length(self) -> Option<usize> {
        matches!(self.oid, VARCHAR_OID | BPCHAR_OID)
            .then_some(())
            .and((self.typmod >= 4).then(|| (self.typmod - 4) as usize))
    }

    /// Precision and scale of a numeric type declared with them.
    pub fn precision_scale(self) -> Option<(i32, i32)> {
        (self.oid == NUMERIC_OID && self.typmod >= 4).then(|| ((self.typmod - 4) >> 16, (self.typmod - 4) & 0xffff))
    }

    /// The type's name without its modifier, as `information_schema.columns.data_type` says it.
    pub fn base_name(self) -> &'static str {
        match self.oid {
            VARCHAR_OID => "character varying",
            BPCHAR_OID => "character",
            JSON_OID => "json",
            JSONB_OID => "jsonb",
            _ => "numeric",
        }
    }

    /// The type's `pg_type.typname`.
    pub fn type_name(self) -> &'static str {
        match self.oid {
            VARCHAR_OID => "varchar",
            BPCHAR_OID => "bpchar",
            JSON_OID => "json",
            JSONB_OID => "jsonb",
            _ => "numeric",
        }
    }

    /// `json` or `jsonb`: the values are JSON text.
    pub fn is_json(self) -> bool {
        matches!(self.oid, JSON_OID | JSONB_OID)
    }

    /// `jsonb`: sent in binary as a version byte (1) and the text.
    pub fn is_jsonb(self) -> bool {
        self.oid == JSONB_OID
    }

    /// The type as `format_type` prints it: `character varying(20)`, `numeric(10,2)`.
    pub fn sql_name(self) -> String {
        match (self.max_length(), self.precision_scale()) {
            (Some(n), _) => format!("{}({n})", self.base_name()),
            (_, Some((p, s))) => format!("numeric({p},{s})"),
            _ => self.base_name().to_string(),
        }
    }

    /// Checks `values` against the declared type as Postgres does when a value is stored: a
    /// character type's longer value is refused (22001) unless what is past the length is
    /// spaces, which are cut; a `json` value must be JSON (22P02), and a `jsonb` one is also
    /// written as `jsonb` is (`types::json`). None when nothing needs to change.
    pub fn fit(self, values: &dyn Array) -> Result<Option<ArrayRef>> {
        match self.oid {
            JSON_OID | JSONB_OID => self.fit_json(values),
            _ => self.fit_length(values),
        }
    }

    fn fit_json(self, values: &dyn Array) -> Result<Option<ArrayRef>> {
        let as_utf8 = datafusion::arrow::compute::cast(values, &DataType::Utf8)?;
        let strings = as_utf8.as_string::<i32>();
        let kind = self.type_name();
        let mut normalized = Vec::with_capacity(strings.len());
        for value in strings.iter() {
            normalized.push(match value {
                None => None,
                Some(text) => {
                    let parsed = crate::types::json::Json::parse(text, kind)?;
                    self.is_jsonb().then(|| parsed.to_jsonb().to_jsonb_text())
                }
            });
        }
        if !self.is_jsonb() {
            return Ok(None);
        }
        let fitted: ArrayRef = std::sync::Arc::new(StringArray::from(normalized));
        Ok(Some(datafusion::arrow::compute::cast(&fitted, values.data_type())?))
    }

    fn fit_length(self, values: &dyn Array) -> Result<Option<ArrayRef>> {
        let Some(max) = self.max_length() else { return Ok(None) };
        let as_utf8 = match values.data_type() {
            DataType::Utf8View | DataType::LargeUtf8 => datafusion::arrow::compute::cast(values, &DataType::Utf8)?,
            DataType::Utf8 => datafusion::arrow::array::make_array(values.to_data()),
            _ => return Ok(None),
        };
        let strings = as_utf8.as_string::<i32>();
        let too_long = |s: &str| s.len() > max && s.chars().count() > max;
        if !strings.iter().flatten().any(too_long) {
            return Ok(None);
        }
        let mut fitted = Vec::with_capacity(strings.len());
        for value in strings.iter() {
            match value {
                Some(s) if too_long(s) => {
                    let cut = s.char_indices().nth(max).map(|(i, _)| i).unwrap_or(s.len());
                    if s[cut..].chars().any(|c| c != ' ') {
                        return Err(WeirError::new(
                            SqlState::STRING_DATA_RIGHT_TRUNCATION,
                            format!("value too long for type {}", self.sql_name()),
                        ));
                    }
                    fitted.push(Some(&s[..cut]));
                }
                other => fitted.push(other),
            }
        }
        let fitted: ArrayRef = std::sync::Arc::new(StringArray::from(fitted));
        Ok(Some(datafusion::arrow::compute::cast(&fitted, values.data_type())?))
    }
}
