//! GGUF metadata values: the twelve scalar types, strings and arrays.

use std::fmt;

/// The type tag of a GGUF metadata value (`gguf_metadata_value_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// An unsigned 8-bit integer (`uint8`, id 0).
    U8,
    /// A signed 8-bit integer (`int8`, id 1).
    I8,
    /// An unsigned 16-bit integer (`uint16`, id 2).
    U16,
    /// A signed 16-bit integer (`int16`, id 3).
    I16,
    /// An unsigned 32-bit integer (`uint32`, id 4).
    U32,
    /// A signed 32-bit integer (`int32`, id 5).
    I32,
    /// An IEEE 754 single-precision float (`float32`, id 6).
    F32,
    /// A boolean, one byte (0 or 1) in the file (`bool`, id 7).
    Bool,
    /// A UTF-8 string: a u64 byte length, then the bytes (`string`, id 8).
    String,
    /// An array (`array`, id 9): its element type, a u64 count, then the
    /// elements; arrays do not nest.
    Array,
    /// An unsigned 64-bit integer (`uint64`, id 10).
    U64,
    /// A signed 64-bit integer (`int64`, id 11).
    I64,
    /// An IEEE 754 double-precision float (`float64`, id 12).
    F64,
}

impl ValueType {
    const BY_ID: [ValueType; 13] = [
        ValueType::U8,
        ValueType::I8,
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::Bool,
        ValueType::String,
        ValueType::Array,
        ValueType::U64,
        ValueType::I64,
        ValueType::F64,
    ];

    /// Every type except `Array`, in id order: what array elements can be.
    pub const ELEMENTS: [ValueType; 12] = [
        ValueType::U8,
        ValueType::I8,
        ValueType::U16,
        ValueType::I16,
        ValueType::U32,
        ValueType::I32,
        ValueType::F32,
        ValueType::Bool,
        ValueType::String,
        ValueType::U64,
        ValueType::I64,
        ValueType::F64,
    ];

    /// The type with GGUF id `id` (0 to 12); `None` for any other id.
    pub fn from_id(id: u32) -> Option<ValueType> {
        ValueType::BY_ID.get(id as usize).copied()
    }

    /// The GGUF id written before a value of this type (0 to 12).
    pub fn id(self) -> u32 {
        ValueType::BY_ID
            .iter()
            .position(|&t| t == self)
            .unwrap_or(0) as u32
    }

    /// The name used in header JSON: `uint8`, `int32`, `float32`, `bool`,
    /// `string`, `array`, ...
    pub fn name(self) -> &'static str {
        match self {
            ValueType::U8 => "uint8",
            ValueType::I8 => "int8",
            ValueType::U16 => "uint16",
            ValueType::I16 => "int16",
            ValueType::U32 => "uint32",
            ValueType::I32 => "int32",
            ValueType::F32 => "float32",
            ValueType::Bool => "bool",
            ValueType::String => "string",
            ValueType::Array => "array",
            ValueType::U64 => "uint64",
            ValueType::I64 => "int64",
            ValueType::F64 => "float64",
        }
    }

    /// The type of a header JSON name (see [`ValueType::name`]); `None` for
    /// an unknown name.
    pub fn from_name(name: &str) -> Option<ValueType> {
        ValueType::BY_ID.into_iter().find(|t| t.name() == name)
    }

    /// Bytes of one value in the file, for fixed-size types.
    pub fn fixed_size(self) -> Option<usize> {
        match self {
            ValueType::U8 | ValueType::I8 | ValueType::Bool => Some(1),
            ValueType::U16 | ValueType::I16 => Some(2),
            ValueType::U32 | ValueType::I32 | ValueType::F32 => Some(4),
            ValueType::U64 | ValueType::I64 | ValueType::F64 => Some(8),
            ValueType::String | ValueType::Array => None,
        }
    }

    /// The fewest bytes one value of this type takes in a file (a string
    /// is at least its 8-byte length, an array its type and count).
    pub fn min_size(self) -> usize {
        match self {
            ValueType::String => 8,
            ValueType::Array => 12,
            t => t.fixed_size().unwrap_or(1),
        }
    }
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The values of an array, one vector per element type.
#[derive(Clone, Debug, PartialEq)]
pub enum ArrayValues {
    /// The elements of an `array[uint8]`.
    U8(Vec<u8>),
    /// The elements of an `array[int8]`.
    I8(Vec<i8>),
    /// The elements of an `array[uint16]`.
    U16(Vec<u16>),
    /// The elements of an `array[int16]`.
    I16(Vec<i16>),
    /// The elements of an `array[uint32]`.
    U32(Vec<u32>),
    /// The elements of an `array[int32]`.
    I32(Vec<i32>),
    /// The elements of an `array[float32]`.
    F32(Vec<f32>),
    /// The elements of an `array[bool]`.
    Bool(Vec<bool>),
    /// The elements of an `array[string]`.
    String(Vec<String>),
    /// The elements of an `array[uint64]`.
    U64(Vec<u64>),
    /// The elements of an `array[int64]`.
    I64(Vec<i64>),
    /// The elements of an `array[float64]`.
    F64(Vec<f64>),
}

impl ArrayValues {
    /// The element type (never [`ValueType::Array`]).
    pub fn elem_type(&self) -> ValueType {
        match self {
            ArrayValues::U8(_) => ValueType::U8,
            ArrayValues::I8(_) => ValueType::I8,
            ArrayValues::U16(_) => ValueType::U16,
            ArrayValues::I16(_) => ValueType::I16,
            ArrayValues::U32(_) => ValueType::U32,
            ArrayValues::I32(_) => ValueType::I32,
            ArrayValues::F32(_) => ValueType::F32,
            ArrayValues::Bool(_) => ValueType::Bool,
            ArrayValues::String(_) => ValueType::String,
            ArrayValues::U64(_) => ValueType::U64,
            ArrayValues::I64(_) => ValueType::I64,
            ArrayValues::F64(_) => ValueType::F64,
        }
    }

    /// Elements in the array.
    pub fn len(&self) -> usize {
        match self {
            ArrayValues::U8(v) => v.len(),
            ArrayValues::I8(v) => v.len(),
            ArrayValues::U16(v) => v.len(),
            ArrayValues::I16(v) => v.len(),
            ArrayValues::U32(v) => v.len(),
            ArrayValues::I32(v) => v.len(),
            ArrayValues::F32(v) => v.len(),
            ArrayValues::Bool(v) => v.len(),
            ArrayValues::String(v) => v.len(),
            ArrayValues::U64(v) => v.len(),
            ArrayValues::I64(v) => v.len(),
            ArrayValues::F64(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a scalar value.
    pub fn get(&self, i: usize) -> Option<Value> {
        Some(match self {
            ArrayValues::U8(v) => Value::U8(*v.get(i)?),
            ArrayValues::I8(v) => Value::I8(*v.get(i)?),
            ArrayValues::U16(v) => Value::U16(*v.get(i)?),
            ArrayValues::I16(v) => Value::I16(*v.get(i)?),
            ArrayValues::U32(v) => Value::U32(*v.get(i)?),
            ArrayValues::I32(v) => Value::I32(*v.get(i)?),
            ArrayValues::F32(v) => Value::F32(*v.get(i)?),
            ArrayValues::Bool(v) => Value::Bool(*v.get(i)?),
            ArrayValues::String(v) => Value::String(v.get(i)?.clone()),
            ArrayValues::U64(v) => Value::U64(*v.get(i)?),
            ArrayValues::I64(v) => Value::I64(*v.get(i)?),
            ArrayValues::F64(v) => Value::F64(*v.get(i)?),
        })
    }

    /// Every element as an `i128` if this is an integer array (the type
    /// that holds every GGUF integer), for typed getters.
    pub fn integers(&self) -> Option<Vec<i128>> {
        fn all<T: Copy + Into<i128>>(v: &[T]) -> Vec<i128> {
            v.iter().map(|&x| x.into()).collect()
        }
        Some(match self {
            ArrayValues::U8(v) => all(v),
            ArrayValues::I8(v) => all(v),
            ArrayValues::U16(v) => all(v),
            ArrayValues::I16(v) => all(v),
            ArrayValues::U32(v) => all(v),
            ArrayValues::I32(v) => all(v),
            ArrayValues::U64(v) => all(v),
            ArrayValues::I64(v) => all(v),
            _ => return None,
        })
    }

    /// An empty vector of element type `t` (not `Array`).
    pub fn empty(t: ValueType) -> Option<ArrayValues> {
        Some(match t {
            ValueType::U8 => ArrayValues::U8(Vec::new()),
            ValueType::I8 => ArrayValues::I8(Vec::new()),
            ValueType::U16 => ArrayValues::U16(Vec::new()),
            ValueType::I16 => ArrayValues::I16(Vec::new()),
            ValueType::U32 => ArrayValues::U32(Vec::new()),
            ValueType::I32 => ArrayValues::I32(Vec::new()),
            ValueType::F32 => ArrayValues::F32(Vec::new()),
            ValueType::Bool => ArrayValues::Bool(Vec::new()),
            ValueType::String => ArrayValues::String(Vec::new()),
            ValueType::U64 => ArrayValues::U64(Vec::new()),
            ValueType::I64 => ArrayValues::I64(Vec::new()),
            ValueType::F64 => ArrayValues::F64(Vec::new()),
            ValueType::Array => return None,
        })
    }
}

/// A GGUF array: its element type and length, and its values unless only
/// the length is known (a header JSON may give `{"type": "array[string]",
/// "size": 128256}` for a vocabulary it does not spell out).
#[derive(Clone, Debug, PartialEq)]
pub struct Array {
    elem: ValueType,
    len: u64,
    values: Option<ArrayValues>,
}

impl Array {
    /// An array with its values.
    pub fn new(values: ArrayValues) -> Array {
        Array {
            elem: values.elem_type(),
            len: values.len() as u64,
            values: Some(values),
        }
    }

    /// An array known only by its element type and length. `None` if
    /// `elem` is `Array` (GGUF arrays do not nest).
    pub fn of_len(elem: ValueType, len: u64) -> Option<Array> {
        (elem != ValueType::Array).then_some(Array {
            elem,
            len,
            values: None,
        })
    }

    /// The element type (never [`ValueType::Array`]).
    pub fn elem_type(&self) -> ValueType {
        self.elem
    }

    /// Elements in the array, known even when the values are not.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The values, or `None` when only the length is known.
    pub fn values(&self) -> Option<&ArrayValues> {
        self.values.as_ref()
    }

    /// The same array without its values.
    pub fn without_values(&self) -> Array {
        Array {
            elem: self.elem,
            len: self.len,
            values: None,
        }
    }

    /// The JSON-style type name: `array[int32]`.
    pub fn type_name(&self) -> String {
        format!("array[{}]", self.elem.name())
    }
}

/// One GGUF metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A `uint8`.
    U8(u8),
    /// An `int8`.
    I8(i8),
    /// A `uint16`.
    U16(u16),
    /// An `int16`.
    I16(i16),
    /// A `uint32`.
    U32(u32),
    /// An `int32`.
    I32(i32),
    /// A `float32`.
    F32(f32),
    /// A `bool`.
    Bool(bool),
    /// A `string` (UTF-8).
    String(String),
    /// An array of one element type, its values possibly unknown ([`Array`]).
    Array(Array),
    /// A `uint64`.
    U64(u64),
    /// An `int64`.
    I64(i64),
    /// A `float64`.
    F64(f64),
}

impl Value {
    /// The type tag the value is written with.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// A name for messages: `uint32`, `array[string]`, ...
    pub fn type_name(&self) -> String {
        match self {
            Value::Array(a) => a.type_name(),
            v => v.value_type().name().to_string(),
        }
    }

    /// Any integer value, widened.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// A float32 or float64 value.
    pub fn as_float(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            _ => None,
        }
    }

    /// The text of a string value; `None` for any other type.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// An array value; `None` for a scalar or string.
    pub fn as_array(&self) -> Option<&Array> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }
}

impl From<ArrayValues> for Value {
    fn from(v: ArrayValues) -> Value {
        Value::Array(Array::new(v))
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Value {
        Value::String(s.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_ids_and_names_round_trip() {
        for id in 0..13 {
            let t = ValueType::from_id(id).unwrap();
            assert_eq!(t.id(), id);
            assert_eq!(ValueType::from_name(t.name()), Some(t));
        }
        assert_eq!(ValueType::from_id(13), None);
        assert_eq!(ValueType::from_id(8), Some(ValueType::String));
        assert_eq!(ValueType::from_id(10), Some(ValueType::U64));
    }

    #[test]
    fn arrays_know_their_length_with_or_without_values() {
        let a = Array::new(ArrayValues::I32(vec![32, 32, 8]));
        assert_eq!((a.len(), a.elem_type()), (3, ValueType::I32));
        assert_eq!(a.type_name(), "array[int32]");
        let b = a.without_values();
        assert_eq!(b.len(), 3);
        assert!(b.values().is_none());
        assert!(Array::of_len(ValueType::Array, 2).is_none());
    }

    #[test]
    fn integer_views_widen_every_integer_type() {
        assert_eq!(Value::U64(u64::MAX).as_integer(), Some(u64::MAX as i128));
        assert_eq!(Value::I8(-3).as_integer(), Some(-3));
        assert_eq!(Value::F32(1.0).as_integer(), None);
        assert_eq!(Value::F32(0.5).as_float(), Some(0.5));
        let a = ArrayValues::U16(vec![1, 2]);
        assert_eq!(a.integers(), Some(vec![1, 2]));
        assert_eq!(ArrayValues::F32(vec![1.0]).integers(), None);
    }
}
