// The dims of a shape: a small vector of int64_t that keeps up to
// inline_rank dims in place. Every tensor copy copies its shape, and with a
// std::vector that meant a heap allocation per copy of any rank >= 1 tensor;
// ranks above inline_rank (rare) still go to the heap.
//
// It offers the std::vector operations that code working on dims uses
// (iteration, indexing, push_back, insert, erase, resize, ...) and converts
// to std::vector<int64_t>, so `auto d = s.dims(); d.insert(...)` and
// passing dims to a function taking a vector keep working.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <vector>

#include "core/export.hpp"

namespace actorflow {

class ACTORFLOW_API dim_vector {
 public:
  static constexpr size_t inline_rank = 6;

  using value_type = int64_t;
  using size_type = size_t;
  using difference_type = std::ptrdiff_t;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  using pointer = int64_t*;
  using const_pointer = const int64_t*;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;

  dim_vector() = default;
  dim_vector(std::initializer_list<int64_t> dims) { assign(dims.begin(), dims.end()); }
  explicit dim_vector(size_t n, int64_t value = 0) { assign(n, value); }
  template <std::input_iterator It>
  dim_vector(It first, It last) {
    assign(first, last);
  }
  explicit dim_vector(const std::vector<int64_t>& dims) { copy_from(dims.data(), dims.size()); }
  dim_vector(const dim_vector& other) { copy_from(other); }
  dim_vector(dim_vector&& other) noexcept { take(other); }
  dim_vector& operator=(const dim_vector& other) {
    if (this != &other) copy_from(other);
    return *this;
  }
  dim_vector& operator=(dim_vector&& other) noexcept {
    if (this != &other) {
      release();
      take(other);
    }
    return *this;
  }
  dim_vector& operator=(std::initializer_list<int64_t> dims) {
    assign(dims.begin(), dims.end());
    return *this;
  }
  ~dim_vector() {
    if (on_heap()) delete[] heap_;
  }

  /// A copy as a std::vector (for APIs and attributes that take one).
  operator std::vector<int64_t>() const { return std::vector<int64_t>(begin(), end()); }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  size_t capacity() const { return capacity_; }
  int64_t* data() { return on_heap() ? heap_ : inline_; }
  const int64_t* data() const { return on_heap() ? heap_ : inline_; }
  iterator begin() { return data(); }
  iterator end() { return data() + size_; }
  const_iterator begin() const { return data(); }
  const_iterator end() const { return data() + size_; }
  const_iterator cbegin() const { return begin(); }
  const_iterator cend() const { return end(); }
  std::reverse_iterator<iterator> rbegin() { return std::reverse_iterator<iterator>(end()); }
  std::reverse_iterator<iterator> rend() { return std::reverse_iterator<iterator>(begin()); }
  std::reverse_iterator<const_iterator> rbegin() const {
    return std::reverse_iterator<const_iterator>(end());
  }
  std::reverse_iterator<const_iterator> rend() const {
    return std::reverse_iterator<const_iterator>(begin());
  }
  int64_t& operator[](size_t i) { return data()[i]; }
  const int64_t& operator[](size_t i) const { return data()[i]; }
  int64_t& front() { return data()[0]; }
  const int64_t& front() const { return data()[0]; }
  int64_t& back() { return data()[size_ - 1]; }
  const int64_t& back() const { return data()[size_ - 1]; }

  void reserve(size_t n) {
    if (n <= capacity_) return;
    auto* grown = new int64_t[n];
    std::copy(begin(), end(), grown);
    if (on_heap()) delete[] heap_;
    heap_ = grown;
    capacity_ = static_cast<uint32_t>(n);
  }
  void clear() { size_ = 0; }
  void resize(size_t n, int64_t value = 0) {
    reserve(n);
    if (n > size_) std::fill(data() + size_, data() + n, value);
    size_ = static_cast<uint32_t>(n);
  }
  void push_back(int64_t d) {
    if (size_ == capacity_) reserve(2 * capacity_);
    data()[size_++] = d;
  }
  void pop_back() { --size_; }

  void assign(size_t n, int64_t value) {
    clear();
    resize(n, value);
  }
  template <std::input_iterator It>
  void assign(It first, It last) {
    *this = collect(first, last);  // through a copy: the range may be our own
  }

  iterator insert(const_iterator pos, int64_t d) { return insert(pos, size_t{1}, d); }
  iterator insert(const_iterator pos, size_t n, int64_t d) {
    size_t at = open_gap(pos, n);
    std::fill(data() + at, data() + at + n, d);
    return data() + at;
  }
  iterator insert(const_iterator pos, std::initializer_list<int64_t> dims) {
    return insert(pos, dims.begin(), dims.end());
  }
  template <std::input_iterator It>
  iterator insert(const_iterator pos, It first, It last) {
    dim_vector values = collect(first, last);  // the range may be our own
    size_t at = open_gap(pos, values.size());
    std::copy(values.begin(), values.end(), data() + at);
    return data() + at;
  }

  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    auto* f = data() + (first - data());
    auto* l = data() + (last - data());
    std::copy(l, end(), f);
    size_ -= static_cast<uint32_t>(l - f);
    return f;
  }

  friend bool operator==(const dim_vector& a, const dim_vector& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const dim_vector& a, const std::vector<int64_t>& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }

 private:
  template <class It>
  static dim_vector collect(It first, It last) {
    dim_vector v;
    for (; first != last; ++first) v.push_back(*first);
    return v;
  }
  // Replaces the dims with other's: inline dims as one fixed-size copy.
  void copy_from(const dim_vector& other) {
    if (other.on_heap()) return copy_from(other.data(), other.size_);
    release();
    size_ = other.size_;
    std::memcpy(inline_, other.inline_, sizeof inline_);
  }
  // Replaces the dims with n from p (not our own).
  void copy_from(const int64_t* p, size_t n) {
    size_ = 0;
    reserve(n);
    std::copy(p, p + n, data());
    size_ = static_cast<uint32_t>(n);
  }
  bool on_heap() const { return capacity_ > inline_rank; }
  void release() {
    if (on_heap()) delete[] heap_;
    capacity_ = inline_rank;
    size_ = 0;
  }
  // Takes other's dims, leaving it empty; `this` holds nothing yet. Inline
  // dims are copied whole, a fixed-size copy cheaper than a loop.
  void take(dim_vector& other) noexcept {
    size_ = other.size_;
    capacity_ = other.capacity_;
    std::memcpy(inline_, other.inline_, sizeof inline_);  // or the heap pointer
    other.size_ = 0;
    other.capacity_ = inline_rank;
  }
  // Makes room for n dims at pos; returns pos as an index.
  size_t open_gap(const_iterator pos, size_t n) {
    auto at = static_cast<size_t>(pos - data());
    if (size_ + n > capacity_) reserve(std::max<size_t>(size_ + n, 2 * capacity_));
    std::copy_backward(data() + at, data() + size_, data() + size_ + n);
    size_ += static_cast<uint32_t>(n);
    return at;
  }

  // At most inline_rank dims live in inline_; beyond, heap_ holds capacity_.
  uint32_t size_ = 0;
  uint32_t capacity_ = inline_rank;
  union {
    int64_t inline_[inline_rank] = {};
    int64_t* heap_;
  };
};

}  // namespace actorflow
